// Throwaway certificates for the TLS tests, made with OpenSSL's API into a
// temporary directory: a CA, and leaves it signs with the SANs asked for
// (expired ones too), each as PEM files.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <unistd.h>

namespace dpukit::mesh::testing {

class Pki {
 public:
  // A fresh directory with ca.crt / ca.key.
  Pki() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dpukit-tls-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp");
    dir_ = tmpl;
    ca_key_ = EVP_EC_gen("P-256");
    ca_ = make_cert(ca_key_, "test-ca", "", nullptr, nullptr, 0, 30, true);
    write(dir_ / "ca.crt", pem(ca_));
  }
  ~Pki() {
    X509_free(ca_);
    EVP_PKEY_free(ca_key_);
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  Pki(const Pki&) = delete;
  Pki& operator=(const Pki&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // <name>.crt and <name>.key: a leaf with `san` (e.g. "URI:spiffe://...,DNS:localhost"),
  // signed by this CA (or self-signed when `self_signed`), valid from now+`from_days` to now+`to_days`.
  void leaf(const std::string& name, const std::string& san, long from_days = 0, long to_days = 30,
            bool self_signed = false) {
    EVP_PKEY* key = EVP_EC_gen("P-256");
    X509* cert = self_signed ? make_cert(key, name, san, nullptr, nullptr, from_days, to_days, false)
                             : make_cert(key, name, san, ca_, ca_key_, from_days, to_days, false);
    write(dir_ / (name + ".crt"), pem(cert));
    write(dir_ / (name + ".key"), pem_key(key));
    X509_free(cert);
    EVP_PKEY_free(key);
  }

  static std::string read(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void write(const std::filesystem::path& p, const std::string& text) {
    // Write then rename, as a node agent does: a reader never sees half a file.
    const std::filesystem::path tmp = p.string() + ".tmp";
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, p);
  }

 private:
  static X509* make_cert(EVP_PKEY* key, const std::string& cn, const std::string& san, X509* issuer,
                         EVP_PKEY* issuer_key, long from_days, long to_days, bool ca) {
    X509* x = X509_new();
    X509_set_version(x, 2);
    static long serial = 1;
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
    X509_gmtime_adj(X509_getm_notBefore(x), from_days * 86400 - 60);
    X509_gmtime_adj(X509_getm_notAfter(x), to_days * 86400);
    X509_set_pubkey(x, key);
    X509_NAME* name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
    X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name);
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer ? issuer : x, x, nullptr, nullptr, 0);
    const auto add = [&](int nid, const std::string& value) {
      X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
      X509_add_ext(x, ext, -1);
      X509_EXTENSION_free(ext);
    };
    add(NID_basic_constraints, ca ? "critical,CA:TRUE" : "CA:FALSE");
    if (ca) add(NID_key_usage, "critical,keyCertSign,cRLSign");
    else add(NID_ext_key_usage, "serverAuth,clientAuth");
    if (!san.empty()) add(NID_subject_alt_name, san);
    X509_sign(x, issuer_key ? issuer_key : key, EVP_sha256());
    return x;
  }
  static std::string pem(X509* x) {
    std::unique_ptr<BIO, decltype(&BIO_free)> b(BIO_new(BIO_s_mem()), BIO_free);
    PEM_write_bio_X509(b.get(), x);
    char* data = nullptr;
    const long n = BIO_get_mem_data(b.get(), &data);
    return std::string(data, static_cast<size_t>(n));
  }
  static std::string pem_key(EVP_PKEY* k) {
    std::unique_ptr<BIO, decltype(&BIO_free)> b(BIO_new(BIO_s_mem()), BIO_free);
    PEM_write_bio_PrivateKey(b.get(), k, nullptr, nullptr, 0, nullptr, nullptr);
    char* data = nullptr;
    const long n = BIO_get_mem_data(b.get(), &data);
    return std::string(data, static_cast<size_t>(n));
  }

  std::filesystem::path dir_;
  EVP_PKEY* ca_key_ = nullptr;
  X509* ca_ = nullptr;
};

}  // namespace dpukit::mesh::testing
