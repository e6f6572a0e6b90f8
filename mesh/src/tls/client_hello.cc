#include "tls/client_hello.h"

#include <cctype>

namespace dpukit::mesh {

namespace {

// A bounds-checked reader over the ClientHello body.
struct Reader {
  const uint8_t* p;
  size_t n;
  bool ok = true;
  uint32_t num(size_t bytes) {
    if (n < bytes) {
      ok = false;
      return 0;
    }
    uint32_t v = 0;
    for (size_t i = 0; i < bytes; ++i) v = v << 8 | p[i];
    p += bytes;
    n -= bytes;
    return v;
  }
  Reader sub(size_t len) {
    if (n < len) {
      ok = false;
      return {p, 0, false};
    }
    Reader r{p, len};
    p += len;
    n -= len;
    return r;
  }
};

void read_extensions(Reader ext, ClientHello& out) {
  while (ext.ok && ext.n > 0) {
    const uint32_t type = ext.num(2);
    Reader body = ext.sub(ext.num(2));
    if (!ext.ok) return;
    if (type == 0) {  // server_name
      Reader list = body.sub(body.num(2));
      while (list.ok && list.n > 0) {
        const uint32_t name_type = list.num(1);
        Reader name = list.sub(list.num(2));
        if (!list.ok) break;
        if (name_type == 0 && out.sni.empty()) {
          out.sni.assign(reinterpret_cast<const char*>(name.p), name.n);
          for (char& c : out.sni) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        }
      }
    } else if (type == 16) {  // application_layer_protocol_negotiation
      Reader list = body.sub(body.num(2));
      while (list.ok && list.n > 0) {
        Reader proto = list.sub(list.num(1));
        if (list.ok) out.alpn.emplace_back(reinterpret_cast<const char*>(proto.p), proto.n);
      }
    }
  }
}

}  // namespace

ClientHello::Result parse_client_hello(const uint8_t* data, size_t size, ClientHello& out) {
  using R = ClientHello::Result;
  if (size == 0) return R::kNeedMore;
  // A handshake record of TLS 1.0-1.3 (record version 3.x).
  if (data[0] != 0x16) return R::kNotTls;
  if (size >= 2 && data[1] != 0x03) return R::kNotTls;
  // The handshake message may span records: gather their payloads.
  std::string hs;
  size_t pos = 0;
  for (;;) {
    if (size - pos < 5) return size >= kMaxClientHello ? R::kTls : R::kNeedMore;
    if (data[pos] != 0x16) return R::kTls;  // malformed: the handshake decides
    const size_t len = static_cast<size_t>(data[pos + 3]) << 8 | data[pos + 4];
    if (size - pos - 5 < len) return size >= kMaxClientHello ? R::kTls : R::kNeedMore;
    hs.append(reinterpret_cast<const char*>(data + pos + 5), len);
    pos += 5 + len;
    if (hs.size() >= 4) {
      const auto* h = reinterpret_cast<const uint8_t*>(hs.data());
      if (h[0] != 1) return R::kTls;  // not a ClientHello
      const size_t body = static_cast<size_t>(h[1]) << 16 | static_cast<size_t>(h[2]) << 8 | h[3];
      if (hs.size() - 4 >= body) {
        Reader r{h + 4, body};
        r.num(2);                 // legacy_version
        r.sub(32);                // random
        r.sub(r.num(1));          // legacy_session_id
        r.sub(r.num(2));          // cipher_suites
        r.sub(r.num(1));          // legacy_compression_methods
        if (r.ok && r.n >= 2) read_extensions(r.sub(r.num(2)), out);
        return R::kTls;
      }
    }
    if (pos >= kMaxClientHello) return R::kTls;
  }
}

}  // namespace dpukit::mesh
