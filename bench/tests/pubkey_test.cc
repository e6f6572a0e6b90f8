// The pubkey family: bignum_ref's integers and P-256 group, the ref RSA / DSA
// / ECDSA against published vectors, and the rsa / dsa / ecdsa operators'
// lib backend (OpenSSL 3) against ref in both directions.
#include <gtest/gtest.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>

#include <string>
#include <vector>

#include "bignum_ref.h"
#include "hash_ref.h"
#include "operator.h"
#include "pubkey_keys.h"

namespace dpukit::bench {
namespace {

using bn::BigInt;

BigInt H(const char* hex) { return BigInt::from_hex(hex); }

Bytes unhex(const std::string& s) { return H(s.c_str()).to_bytes(s.size() / 2); }

Bytes text(const char* s) { return Bytes(s, s + std::char_traits<char>::length(s)); }

// ---- Integers -----------------------------------------------------------------

TEST(PubkeyBignum, HexAndBytesRoundTrip) {
  const BigInt a = H("00000123456789abcdefFEDCBA9876543210");
  EXPECT_EQ(a.to_hex(), "123456789abcdeffedcba9876543210");
  EXPECT_EQ(a.bit_length(), 121u);
  EXPECT_EQ(BigInt::from_bytes(a.to_bytes(20)), a);
  EXPECT_EQ(a.to_bytes(16)[0], 0x01);
  EXPECT_THROW(a.to_bytes(15), std::length_error);
  EXPECT_EQ(H("0").to_hex(), "0");
  EXPECT_TRUE(H("0000").is_zero());
  EXPECT_THROW(H("12g4"), std::invalid_argument);
  EXPECT_EQ(BigInt(0xfedcba9876543210ull).to_hex(), "fedcba9876543210");
  EXPECT_EQ(BigInt(0xfedcba9876543210ull).low_u64(), 0xfedcba9876543210ull);
}

TEST(PubkeyBignum, ArithmeticAcrossLimbBoundaries) {
  const BigInt max64 = H("ffffffffffffffff"), max128 = H("ffffffffffffffffffffffffffffffff");
  EXPECT_EQ((max128 + BigInt(1)).to_hex(), "100000000000000000000000000000000");
  EXPECT_EQ((H("100000000000000000000000000000000") - BigInt(1)), max128);
  EXPECT_EQ((max64 * max64).to_hex(), "fffffffffffffffe0000000000000001");
  EXPECT_THROW(BigInt(1) - BigInt(2), std::domain_error);
  EXPECT_EQ((BigInt(1) << 200) >> 199, BigInt(2));
  EXPECT_EQ(max128 >> 128, BigInt());
  // 2^256 - 1 = 3 * 5 * 17 * 257 * 641 * 65537 * 274177 * 6700417 * ...: divide out 3 * 5 * 17.
  BigInt q, r;
  const BigInt n = (BigInt(1) << 256) - BigInt(1);
  BigInt::divmod(n, BigInt(255), q, r);
  EXPECT_TRUE(r.is_zero());
  EXPECT_EQ(q * BigInt(255), n);
  // A multi-limb divisor whose quotient estimate needs correcting.
  const BigInt a = H("7fffffffffffffff0000000000000000ffffffffffffffff00000000000000000000000000000001");
  const BigInt b = H("800000000000000000000000000000000000000000000001");
  BigInt::divmod(a, b, q, r);
  EXPECT_LT(r, b);
  EXPECT_EQ(q * b + r, a);
  EXPECT_THROW(a / BigInt(), std::domain_error);
  EXPECT_EQ(bn::gcd(BigInt(3120), BigInt(17 * 48)), BigInt(48));
}

TEST(PubkeyBignum, ModExpKnownValues) {
  EXPECT_EQ(bn::mod_exp(BigInt(4), BigInt(13), BigInt(497)), BigInt(445));  // the textbook right-to-left example
  EXPECT_EQ(bn::mod_exp(BigInt(2), BigInt(10), BigInt(1001)), BigInt(23));
  EXPECT_EQ(bn::mod_exp(BigInt(3), BigInt(5), BigInt(16)), BigInt(3));  // even modulus: 243 mod 16
  EXPECT_EQ(bn::mod_exp(BigInt(7), BigInt(), BigInt(13)), BigInt(1));
  EXPECT_EQ(bn::mod_exp(BigInt(7), BigInt(5), BigInt(1)), BigInt());
  // Textbook RSA (p = 61, q = 53): 65^17 mod 3233 = 2790 and back with d = 2753.
  EXPECT_EQ(bn::mod_exp(BigInt(65), BigInt(17), BigInt(3233)), BigInt(2790));
  EXPECT_EQ(bn::mod_exp(BigInt(2790), BigInt(2753), BigInt(3233)), BigInt(65));
  // Fermat: a^(p-1) = 1 for the Mersenne prime 2^127 - 1 and P-256's p.
  const BigInt m127 = (BigInt(1) << 127) - BigInt(1);
  EXPECT_EQ(bn::mod_exp(H("123456789abcdef0123456789"), m127 - BigInt(1), m127), BigInt(1));
  const BigInt& p256 = bn::P256::instance().p();
  EXPECT_EQ(bn::mod_exp(BigInt(5), p256 - BigInt(1), p256), BigInt(1));
  // 2^(2^k) by repeated squaring modulo a multi-limb odd modulus.
  const BigInt m = (BigInt(1) << 300) + BigInt(7);
  BigInt sq(2);
  for (int i = 0; i < 10; ++i) sq = sq * sq % m;
  EXPECT_EQ(bn::mod_exp(BigInt(2), BigInt(1024), m), sq);
}

TEST(PubkeyBignum, Inverses) {
  EXPECT_EQ(bn::mod_inverse(BigInt(3), BigInt(11)), BigInt(4));
  EXPECT_EQ(bn::mod_inverse(BigInt(17), BigInt(3120)), BigInt(2753));  // textbook RSA d
  EXPECT_THROW(bn::mod_inverse(BigInt(6), BigInt(9)), std::domain_error);
  const bn::P256& curve = bn::P256::instance();
  const BigInt a = H("C9AFA9D845BA75166B5C215767B1D6934E50C3DB36E89B127B8A622B120F6721");
  for (const bn::Montgomery* field : {&curve.order_field()}) {
    const BigInt inv = field->inverse_prime(a);
    EXPECT_EQ(inv, bn::mod_inverse(a, field->modulus()));
    EXPECT_EQ(a * inv % field->modulus(), BigInt(1));
    EXPECT_EQ(field->mod_mul(a, inv), BigInt(1));
  }
  EXPECT_EQ(bn::mod_inverse(a, curve.p()) * a % curve.p(), BigInt(1));
}

TEST(PubkeyBignum, MontgomeryReducesWideValues) {
  const BigInt m = H("F2C3119374CE76C9356990B465374A17F23F9ED35089BD969F61C6DDE9998C1F");
  const bn::Montgomery mont(m);
  for (const BigInt& t : {H("1"), m - BigInt(1), m * m - BigInt(1), (BigInt(1) << 511) + BigInt(12345), m * BigInt(77)}) {
    std::vector<bn::Limb> out(mont.limbs());
    mont.reduce_to_mont(out.data(), t.limbs().data(), t.limbs().size());
    mont.from_mont(out.data(), out.data());
    EXPECT_EQ(mont.store(out.data()), t % m) << t.to_hex();
  }
  EXPECT_THROW(bn::Montgomery(BigInt(10)), std::invalid_argument);
}

// ---- P-256 -------------------------------------------------------------------

TEST(PubkeyEcdsa, P256GroupLaws) {
  const bn::P256& curve = bn::P256::instance();
  const auto& g = curve.generator();
  EXPECT_TRUE(curve.on_curve(g));
  EXPECT_TRUE(curve.mul_base(curve.order()).infinity);  // n G = O
  EXPECT_TRUE(curve.mul_base(BigInt()).infinity);
  const auto two_g = curve.mul_base(BigInt(2));
  EXPECT_TRUE(curve.on_curve(two_g));
  const auto sum = curve.add(g, g);
  EXPECT_EQ(sum.x, two_g.x);
  EXPECT_EQ(sum.y, two_g.y);
  const auto minus_g = curve.mul_base(curve.order() - BigInt(1));  // -G = (x, p - y)
  EXPECT_EQ(minus_g.x, g.x);
  EXPECT_EQ(minus_g.y, curve.p() - g.y);
  EXPECT_TRUE(curve.add(g, minus_g).infinity);
  const auto via_generic = curve.mul(BigInt(12345), g), via_table = curve.mul_base(BigInt(12345));
  EXPECT_EQ(via_generic.x, via_table.x);
  EXPECT_EQ(via_generic.y, via_table.y);
  bn::P256::Affine off = g;
  off.y = off.y + BigInt(1);
  EXPECT_FALSE(curve.on_curve(off));
}

// ---- RSA -----------------------------------------------------------------------

// NIST CAVP, 186-3rsatestvectors.zip, SigGen15_186-3.txt (CAVS 11.4), the
// [mod = 2048] key and two of its SHAAlg = SHA256 cases; the primes are the
// factors of that n (the test checks p q = n).
const char* const kCavpN =
    "cea80475324c1dc8347827818da58bac069d3419c614a6ea1ac6a3b510dcd72cc516954905e9fef908d45e13006adf27d467a7d83c"
    "111d1a5df15ef293771aefb920032a5bb989f8e4f5e1b05093d3f130f984c07a772a3683f4dc6fb28a96815b32123ccdd13954f19d"
    "5b8b24a103e771a34c328755c65ed64e1924ffd04d30b2142cc262f6e0048fef6dbc652f21479ea1c4b1d66d28f4d46ef7185e390c"
    "bfa2e02380582f3188bb94ebbf05d31487a09aff01fcbb4cd4bfd1f0a833b38c11813c84360bb53c7d4481031c40bad8713bb6b835"
    "cb08098ed15ba31ee4ba728a8c8e10f7294e1b4163b7aee57277bfd881a6f9d43e02c6925aa3a043fb7fb78d";
const char* const kCavpE = "260445";
const char* const kCavpD =
    "0997634c477c1a039d44c810b2aaa3c7862b0b88d3708272e1e15f66fc9389709f8a11f3ea6a5af7effa2d01c189c50f0d5bcbe3fa"
    "272e56cfc4a4e1d388a9dcd65df8628902556c8b6bb6a641709b5a35dd2622c73d4640bfa1359d0e76e1f219f8e33eb9bd0b59ec19"
    "8eb2fccaae0346bd8b401e12e3c67cb629569c185a2e0f35a2f741644c1cca5ebb139d77a89a2953fc5e30048c0e619f07c8d21d1e"
    "56b8af07193d0fdf3f49cd49f2ef3138b5138862f1470bd2d16e34a2b9e7777a6c8c8d4cb94b4e8b5d616cd5393753e7b0f31cc7da"
    "559ba8e98d888914e334773baf498ad88d9631eb5fe32e53a4145bf0ba548bf2b0a50c63f67b14e398a34b0d";
const char* const kCavpP =
    "F364E16EF12017EC95B192308C01E087CEE619AB50A5D537CC01841DC92B30BCEF0D9F2C6BBD5DC10BDF5B9F6C354A4F9F210520CA"
    "A72B4F5C36B8D33F10324C55956141891E45B84B49F59EA5BFAC6FFA38900ACA5099AFCD02F6A8257C41CE5BB2E4153832B5C22F91"
    "EB389FA2035C3CF9B3374531C483CB30CEB007259B1D";
const char* const kCavpQ =
    "D95C0995FABDFCBCCFE63E0F3262F806869AB571E1793E97234CBB9BD4B6872A7695389955CF6CE7245345A5DF8021F7D9519563AF"
    "BC2667F5311FAD093DE2C02CD069109B630D68E3BF767F8A788A6ADD7AB199F2D8F6A40B7C1910D9DAB52AC80D0D333AACAB321A93"
    "09DC884DDD4DB637A0C1115AE3C08EFA683F99EB7331";
struct RsaVector {
  const char* msg;
  const char* s;
};
const RsaVector kCavpSha256[] = {
    {"5af283b1b76ab2a695d794c23b35ca7371fc779e92ebf589e304c7f923d8cf976304c19818fcd89d6f07c8d8e08bf371068bdf28ae"
     "6ee83b2e02328af8c0e2f96e528e16f852f1fc5455e4772e288a68f159ca6bdcf902b858a1f94789b3163823e2d0717ff56689eec7"
     "d0e54d93f520d96e1eb04515abc70ae90578ff38d31b",
     "6b8be97d9e518a2ede746ff4a7d91a84a1fc665b52f154a927650db6e7348c69f8c8881f7bcf9b1a6d3366eed30c3aed4e93c203c4"
     "3f5528a45de791895747ade9c5fa5eee81427edee02082147aa311712a6ad5fb1732e93b3d6cd23ffd46a0b3caf62a8b69957cc68a"
     "e39f9993c1a779599cdda949bdaababb77f248fcfeaa44059be5459fb9b899278e929528ee130facd53372ecbc42f3e8de29984258"
     "60406440f248d817432de687112e504d734028e6c5620fa282ca07647006cf0a2ff83e19a916554cc61810c2e855305db4e5cf893a"
     "6a96767365794556ff033359084d7e38a8456e68e21155b76151314a29875feee09557161cbc654541e89e42"},
    {"0c8491fc348d341fe85c46a56115f26035c59e6a2be765c44e2ec83d407ea096d13b57e3d0c758342246c47510a56793e5daeae1b9"
     "6d4ab988378966876aa341b7d1c31bba59b7dbe6d1a16898eef0caca928f8ce84d5c64e025dc1679922d95e5cd3c6b994a385c5c83"
     "46469ef8764c0c74f5336191850c7f7e2b14be0027d8",
     "cacc8d9f5ecd34c143488461135c4951676145c6e472b92f12f758046f172142fa388f285f3fff068242028829047e248059ed4fd3"
     "9d2c5ade469dc7c39345e5114950d2031cc7465fe712c4041d05c756d3f2d88a46ceb99f2e24a52e958a03cd2519a9b137e62d5ca2"
     "b353f7b047b625c3602313fdb53c8db23d83951a599db328fedc4ae06da89ce7f56259b5c8222f7bd3d9740478fd28e5810db78aee"
     "8623fdd39f603f8ddf98081d7873980c4eb0e22a9cd408f7c4134c12d2049a2d120f4b62e6b382b997fc375ef7ac955fcf80b045c3"
     "d6385ff422dad350c68870539068a162a2edbb93ceefed9677939b90bd3dfa0dc053460b4e2332efa692179a"},
};

bn::RsaPkcs1Sha256 cavp_key() {
  return bn::RsaPkcs1Sha256({H(kCavpN), H(kCavpE), H(kCavpD), H(kCavpP), H(kCavpQ), {}, {}, {}});
}

TEST(PubkeyRsa, NistCavpSigGen15Sha256) {
  const bn::RsaPkcs1Sha256 rsa = cavp_key();
  ASSERT_EQ(rsa.modulus_bytes(), 256u);
  bn::RsaPkcs1Sha256::Scratch scratch;
  for (const RsaVector& v : kCavpSha256) {
    const Bytes msg = unhex(v.msg), want = unhex(v.s);
    Bytes sig(256);
    rsa.sign(msg, sig, scratch);
    EXPECT_EQ(hex(sig, 256), hex(want, 256));
    EXPECT_TRUE(rsa.verify(msg, want));
  }
}

TEST(PubkeyRsa, EncodingIsEmsaPkcs1V15WithSha256DigestInfo) {
  const bn::RsaPkcs1Sha256 rsa = cavp_key();
  Bytes em(256);
  rsa.encode(text("abc"), em);
  EXPECT_EQ(em[0], 0x00);
  EXPECT_EQ(em[1], 0x01);
  for (size_t i = 2; i < 256 - 52; ++i) ASSERT_EQ(em[i], 0xff) << i;
  // 0x00, then DigestInfo (RFC 8017 9.2 note 1), then SHA-256("abc") (FIPS 180-2 B.1).
  EXPECT_EQ(hex(std::span<const uint8_t>(em).subspan(256 - 52), 52),
            "003031300d060960864801650304020105000420"
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(PubkeyRsa, VerifyRejectsTamperedSignatureAndMessage) {
  const bn::RsaPkcs1Sha256 rsa = cavp_key();
  const Bytes msg = unhex(kCavpSha256[0].msg), sig = unhex(kCavpSha256[0].s);
  ASSERT_TRUE(rsa.verify(msg, sig));
  Bytes bad_sig = sig;
  bad_sig[100] ^= 0x01;
  EXPECT_FALSE(rsa.verify(msg, bad_sig));
  Bytes bad_msg = msg;
  bad_msg[0] ^= 0x80;
  EXPECT_FALSE(rsa.verify(bad_msg, sig));
  EXPECT_FALSE(rsa.verify(msg, Bytes(sig.begin() + 1, sig.end())));
  EXPECT_FALSE(rsa.verify(msg, H(kCavpN).to_bytes(256)));  // s >= n
}

TEST(PubkeyRsa, EmbeddedKeysAreConsistent) {
  for (const RsaKeyHex* k : {&kRsa2048Key, &kRsa3072Key, &kRsa4096Key}) {
    // The constructor checks p q = n, e d = 1 mod lcm(p-1, q-1) and the CRT values.
    const bn::RsaPkcs1Sha256 rsa({H(k->n), H(k->e), H(k->d), H(k->p), H(k->q), H(k->dp), H(k->dq), H(k->qinv)});
    EXPECT_EQ(rsa.modulus_bytes() * 8, k->bits);
    EXPECT_EQ(H(k->n).bit_length(), k->bits);
  }
  EXPECT_THROW(bn::RsaPkcs1Sha256({H(kCavpN), H(kCavpE), H(kCavpD) + BigInt(2), H(kCavpP), H(kCavpQ), {}, {}, {}}),
               std::invalid_argument);
}

// ---- DSA and ECDSA: RFC 6979 appendix A.2.2 and A.2.5 -----------------------

struct SigVector {
  const char* message;
  const char* k;
  const char* r;
  const char* s;
};
// RFC 6979 A.2.2, DSA 2048 bits, with SHA-256.
const SigVector kRfc6979Dsa2048Sha256[] = {
    {"sample", "8926A27C40484216F052F4427CFD5647338B7B3939BC6573AF4333569D597C52",
     "EACE8BDBBE353C432A795D9EC556C6D021F7A03F42C36E9BC87E4AC7932CC809",
     "7081E175455F9247B812B74583E9E94F9EA79BD640DC962533B0680793A38D53"},
    {"test", "1D6CE6DDA1C5D37307839CD03AB0A5CBB18E60D800937D67DFB4479AAC8DEAD7",
     "8190012A1969F9957D56FCCAAD223186F423398D58EF5B3CEFD5A4146A4476F0",
     "7452A53F7075D417B4B013B278D1BB8BBD21863F5E7B1CEE679CF2188E1AB19E"},
};
// RFC 6979 A.2.5, ECDSA P-256, with SHA-256.
const SigVector kRfc6979P256Sha256[] = {
    {"sample", "A6E3C57DD01ABE90086538398355DD4C3B17AA873382B0F24D6129493D8AAD60",
     "EFD48B2AACB6A8FD1140DD9CD45E81D69D2C877B56AAF991C34D0EA84EAF3716",
     "F7CB1C942D657C41D436C7A1B6E29F65F3E900DBB9AFF4064DC4AB2F843ACDA8"},
    {"test", "D16B6AE827F17175E040871A1C7EC3500192C4C92677336EC2537ACAEE0008E0",
     "F1ABB023518351CD71D881567B1EA663ED3EFCF6C5132B354F28D3B0B7D38367",
     "019F4113742A2B14BD25926B49C649155F267E60D3814B4C0CC84250E46F0083"},
};

bn::DsaSha256 rfc_dsa() {
  return bn::DsaSha256({H(kDsa2048Key.p), H(kDsa2048Key.q), H(kDsa2048Key.g), H(kDsa2048Key.x), H(kDsa2048Key.y)});
}

Bytes rs_of(const SigVector& v) {
  Bytes rs = H(v.r).to_bytes(32), s = H(v.s).to_bytes(32);
  rs.insert(rs.end(), s.begin(), s.end());
  return rs;
}

// RFC 6979's vectors for a signer (DSA or ECDSA, SHA-256): each message's
// deterministic nonce k, its signature (r, s), and that the signature verifies.
template <class Signer, size_t N>
void expect_rfc6979(const Signer& signer, const SigVector (&vectors)[N]) {
  for (const SigVector& v : vectors) {
    const Bytes msg = text(v.message);
    EXPECT_EQ(signer.nonce(sha256_ref(msg)), H(v.k)) << v.message;
    Bytes rs(64);
    signer.sign(msg, rs);
    EXPECT_EQ(hex(rs), hex(rs_of(v))) << v.message;
    EXPECT_TRUE(signer.verify(msg, rs));
  }
}

TEST(PubkeyDsa, Rfc6979A22Sha256) {
  const bn::DsaSha256 dsa = rfc_dsa();  // the constructor checks g^q = 1 and y = g^x
  expect_rfc6979(dsa, kRfc6979Dsa2048Sha256);
}

// `rs` verifies for `msg` and not for `other`, nor with one bit of it
// flipped (byte `at`), nor as all zeros.
template <class Signer>
void expect_only_its_signature(const Signer& signer, const Bytes& msg, const Bytes& other, const Bytes& rs, size_t at,
                               uint8_t bit) {
  ASSERT_TRUE(signer.verify(msg, rs));
  EXPECT_FALSE(signer.verify(other, rs));
  Bytes bad = rs;
  bad[at] ^= bit;
  EXPECT_FALSE(signer.verify(msg, bad));
  EXPECT_FALSE(signer.verify(msg, Bytes(64, 0)));
}

TEST(PubkeyDsa, VerifyRejectsTamperedSignatureAndMessage) {
  const bn::DsaSha256 dsa = rfc_dsa();
  const Bytes msg = text("sample"), rs = rs_of(kRfc6979Dsa2048Sha256[0]);
  expect_only_its_signature(dsa, msg, text("samplf"), rs, 40, 0x04);
  Bytes swapped(rs.begin() + 32, rs.end());
  swapped.insert(swapped.end(), rs.begin(), rs.begin() + 32);
  EXPECT_FALSE(dsa.verify(msg, swapped));
  Bytes r_is_q = H(kDsa2048Key.q).to_bytes(32);
  r_is_q.insert(r_is_q.end(), rs.begin() + 32, rs.end());
  EXPECT_FALSE(dsa.verify(msg, r_is_q));
}

TEST(PubkeyEcdsa, Rfc6979A25Sha256) {
  const bn::EcdsaP256Sha256 ecdsa(H(kP256Key.d));
  EXPECT_EQ(ecdsa.public_key().x, H(kP256Key.qx));  // RFC 6979 A.2.5: U = x G
  EXPECT_EQ(ecdsa.public_key().y, H(kP256Key.qy));
  expect_rfc6979(ecdsa, kRfc6979P256Sha256);
}

TEST(PubkeyEcdsa, VerifyRejectsTamperedSignatureMessageAndKey) {
  const bn::EcdsaP256Sha256 ecdsa(H(kP256Key.d));
  const Bytes msg = text("test"), rs = rs_of(kRfc6979P256Sha256[1]);
  expect_only_its_signature(ecdsa, msg, text("Test"), rs, 5, 0x10);
  EXPECT_FALSE(bn::EcdsaP256Sha256::verify(bn::P256::instance().generator(), msg, rs));  // another key
  bn::P256::Affine off = ecdsa.public_key();
  off.x = off.x + BigInt(1);
  EXPECT_FALSE(bn::EcdsaP256Sha256::verify(off, msg, rs));  // not on the curve
}

// ---- The operators -------------------------------------------------------------

// Restores an operator's default parameters however the test ends.
struct DefaultParamsAfter {
  Operator& op;
  ~DefaultParamsAfter() { op.reset_params(); }
};

std::vector<Bytes> messages() {
  std::vector<Bytes> v = {text("sample"), Bytes(1, 0x5a), Bytes(64, 0x00), Bytes(1000, 0xff)};
  for (Bytes& b : find_operator("rsa").make_inputs(256, 3, 7)) v.push_back(b);
  return v;
}

TEST(PubkeyOperators, RegisteredInOrderWithTheirBackends) {
  std::vector<std::string> names;
  for (const OperatorInfo& i : list_operators())
    if (i.name == "rsa" || i.name == "dsa" || i.name == "ecdsa") {
      names.push_back(i.name);
      EXPECT_EQ(i.scenario, "security");
      EXPECT_EQ(i.backends, (std::vector<Backend>{Backend::kRef, Backend::kLib, Backend::kDev, Backend::kEngine}));
    }
  EXPECT_EQ(names, (std::vector<std::string>{"rsa", "dsa", "ecdsa"}));
  EXPECT_EQ(operator_params("rsa").at("bits"), "2048");
  for (const char* name : {"rsa", "dsa", "ecdsa"}) {
    EXPECT_EQ(find_operator(name).work_bytes(1024), 1024u);
  }
  // cryptodev: RSA and DSA on crypto_openssl here, checked against ref like lib
  // (RSA byte for byte, DSA by the ref verifier); no soft PMD offers ECDSA.
  for (const char* name : {"rsa", "dsa"}) {
    Operator& op = find_operator(name);
    auto inputs = op.make_inputs(64, 16, 2);
    auto kernels = op.make_kernels(Backend::kDev, 64, 2);
    EXPECT_EQ(check_against_ref(op, Backend::kDev, 64, inputs, kernels), 16u) << name;
  }
  try {
    find_operator("ecdsa").make_kernels(Backend::kDev, 64, 1);
    SUCCEED() << "a cryptodev with ECDSA exists on this machine";
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("ECDSA"), std::string::npos) << e.what();
  }
}

TEST(PubkeyOperators, RefOperatorsReproduceTheRfc6979Vectors) {
  Bytes out;
  find_operator("dsa").make_kernels(Backend::kRef, 6, 1)[0]->process(text("sample"), out);
  EXPECT_EQ(hex(out), hex(rs_of(kRfc6979Dsa2048Sha256[0])));
  find_operator("ecdsa").make_kernels(Backend::kRef, 4, 1)[0]->process(text("test"), out);
  EXPECT_EQ(hex(out), hex(rs_of(kRfc6979P256Sha256[1])));
}

TEST(PubkeyOperators, RsaLibEqualsRefByteForByte) {
  Operator& rsa = find_operator("rsa");
  DefaultParamsAfter restore{rsa};
  for (const char* bits : {"2048", "3072"}) {
    rsa.set_param("bits", bits);
    auto ref = rsa.make_kernels(Backend::kRef, 64, 1);
    auto lib = rsa.make_kernels(Backend::kLib, 64, 2);
    for (const Bytes& m : messages()) {
      Bytes want, got;
      ref[0]->process(m, want);
      ASSERT_EQ(want.size() * 8, std::stoul(bits));
      for (auto& k : lib) {
        k->process(m, got);
        EXPECT_EQ(rsa.mismatch(m, want, got), "") << bits << " bits, " << m.size() << " bytes";
      }
    }
  }
}

TEST(PubkeyOperators, DsaAndEcdsaLibSignaturesPassTheRefVerifier) {
  for (const char* name : {"dsa", "ecdsa"}) {
    Operator& op = find_operator(name);
    auto ref = op.make_kernels(Backend::kRef, 64, 1);
    auto lib = op.make_kernels(Backend::kLib, 64, 1);
    for (const Bytes& m : messages()) {
      Bytes want, got, again;
      ref[0]->process(m, want);
      lib[0]->process(m, got);
      lib[0]->process(m, again);
      ASSERT_EQ(got.size(), 64u);
      EXPECT_EQ(op.mismatch(m, want, got), "") << name << " " << m.size() << " bytes";
      EXPECT_NE(got, again) << name << ": OpenSSL's k is random, two signatures should differ";
    }
  }
}

// ---- OpenSSL verifying the ref's signatures ----------------------------------

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
  void operator()(OSSL_PARAM_BLD* p) const { OSSL_PARAM_BLD_free(p); }
  void operator()(OSSL_PARAM* p) const { OSSL_PARAM_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
};
template <class T>
using Ptr = std::unique_ptr<T, PkeyFree>;

// A public key from named numbers (and one octet-string or UTF-8 parameter).
Ptr<EVP_PKEY> public_key(const char* type, std::vector<std::pair<const char*, const char*>> numbers,
                         const char* group = nullptr, const Bytes& point = {}) {
  Ptr<OSSL_PARAM_BLD> bld(OSSL_PARAM_BLD_new());
  std::vector<Ptr<BIGNUM>> bns;
  for (auto [name, value] : numbers) {
    BIGNUM* bnum = nullptr;
    EXPECT_GT(BN_hex2bn(&bnum, value), 0);
    bns.emplace_back(bnum);
    EXPECT_EQ(OSSL_PARAM_BLD_push_BN(bld.get(), name, bnum), 1);
  }
  if (group) {
    EXPECT_EQ(OSSL_PARAM_BLD_push_utf8_string(bld.get(), OSSL_PKEY_PARAM_GROUP_NAME, group, 0), 1);
    EXPECT_EQ(OSSL_PARAM_BLD_push_octet_string(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size()), 1);
  }
  Ptr<OSSL_PARAM> params(OSSL_PARAM_BLD_to_param(bld.get()));
  Ptr<EVP_PKEY_CTX> ctx(EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr));
  EVP_PKEY* pkey = nullptr;
  EXPECT_EQ(EVP_PKEY_fromdata_init(ctx.get()), 1);
  EXPECT_EQ(EVP_PKEY_fromdata(ctx.get(), &pkey, EVP_PKEY_PUBLIC_KEY, params.get()), 1);
  return Ptr<EVP_PKEY>(pkey);
}

// OpenSSL's verdict on `sig` (raw for RSA, DER for DSA/ECDSA) over SHA-256(msg).
bool openssl_verifies(EVP_PKEY* key, const Bytes& msg, const Bytes& sig, bool rsa) {
  const auto digest = sha256_ref(msg);
  Ptr<EVP_PKEY_CTX> ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, key, nullptr));
  EXPECT_EQ(EVP_PKEY_verify_init(ctx.get()), 1);
  if (rsa) {
    EXPECT_EQ(EVP_PKEY_CTX_set_rsa_padding(ctx.get(), RSA_PKCS1_PADDING), 1);
  }
  EXPECT_EQ(EVP_PKEY_CTX_set_signature_md(ctx.get(), EVP_sha256()), 1);
  return EVP_PKEY_verify(ctx.get(), sig.data(), sig.size(), digest.data(), digest.size()) == 1;
}

// r || s into DER SEQUENCE { INTEGER r, INTEGER s } (all lengths below 128 here).
Bytes der_of(const Bytes& rs) {
  Bytes body;
  for (size_t at : {size_t{0}, rs.size() / 2}) {
    Bytes v(rs.begin() + static_cast<std::ptrdiff_t>(at), rs.begin() + static_cast<std::ptrdiff_t>(at + rs.size() / 2));
    while (v.size() > 1 && v[0] == 0) v.erase(v.begin());
    if (v[0] & 0x80) v.insert(v.begin(), 0x00);
    body.push_back(0x02);
    body.push_back(static_cast<uint8_t>(v.size()));
    body.insert(body.end(), v.begin(), v.end());
  }
  body.insert(body.begin(), {0x30, static_cast<uint8_t>(body.size())});
  return body;
}

TEST(PubkeyOperators, RefSignaturesPassOpenSSLVerify) {
  Ptr<EVP_PKEY> rsa = public_key("RSA", {{OSSL_PKEY_PARAM_RSA_N, kRsa2048Key.n}, {OSSL_PKEY_PARAM_RSA_E, kRsa2048Key.e}});
  Ptr<EVP_PKEY> dsa = public_key("DSA", {{OSSL_PKEY_PARAM_FFC_P, kDsa2048Key.p},
                                         {OSSL_PKEY_PARAM_FFC_Q, kDsa2048Key.q},
                                         {OSSL_PKEY_PARAM_FFC_G, kDsa2048Key.g},
                                         {OSSL_PKEY_PARAM_PUB_KEY, kDsa2048Key.y}});
  Bytes point = H(kP256Key.qx).to_bytes(32), y = H(kP256Key.qy).to_bytes(32);
  point.insert(point.begin(), 0x04);  // uncompressed: 04 || x || y
  point.insert(point.end(), y.begin(), y.end());
  Ptr<EVP_PKEY> ec = public_key("EC", {}, "prime256v1", point);
  ASSERT_TRUE(rsa && dsa && ec);
  auto rsa_ref = find_operator("rsa").make_kernels(Backend::kRef, 64, 1);
  auto dsa_ref = find_operator("dsa").make_kernels(Backend::kRef, 64, 1);
  auto ec_ref = find_operator("ecdsa").make_kernels(Backend::kRef, 64, 1);
  for (const Bytes& m : messages()) {
    Bytes sig;
    rsa_ref[0]->process(m, sig);
    EXPECT_TRUE(openssl_verifies(rsa.get(), m, sig, true)) << "rsa, " << m.size() << " bytes";
    dsa_ref[0]->process(m, sig);
    EXPECT_TRUE(openssl_verifies(dsa.get(), m, der_of(sig), false)) << "dsa, " << m.size() << " bytes";
    ec_ref[0]->process(m, sig);
    EXPECT_TRUE(openssl_verifies(ec.get(), m, der_of(sig), false)) << "ecdsa, " << m.size() << " bytes";
    // OpenSSL refuses what the ref would refuse.
    sig[10] ^= 0x01;
    EXPECT_FALSE(openssl_verifies(ec.get(), m, der_of(sig), false));
  }
}

// ---- Mismatch catches wrong outputs ------------------------------------------

TEST(PubkeyOperators, MismatchCatchesAWrongOutput) {
  for (const char* name : {"rsa", "dsa", "ecdsa"}) {
    Operator& op = find_operator(name);
    const Bytes m = text("a message to sign");
    Bytes want, got;
    op.make_kernels(Backend::kRef, m.size(), 1)[0]->process(m, want);
    op.make_kernels(Backend::kLib, m.size(), 1)[0]->process(m, got);
    ASSERT_EQ(op.mismatch(m, want, got), "") << name;
    Bytes flipped = got;
    flipped[flipped.size() / 2] ^= 0x01;
    EXPECT_NE(op.mismatch(m, want, flipped), "") << name;
    EXPECT_NE(op.mismatch(m, want, Bytes(got.begin(), got.end() - 1)), "") << name;
    if (std::string(name) != "rsa") {  // rsa compares bytes; dsa and ecdsa verify against the input
      Bytes other = m;
      other[0] ^= 0x01;
      EXPECT_NE(op.mismatch(other, want, got), "") << name << ": a signature of another message";
    }
  }
}

TEST(PubkeyOperators, RsaBitsParameterSelectsAnEmbeddedKey) {
  Operator& rsa = find_operator("rsa");
  DefaultParamsAfter restore{rsa};
  rsa.set_param("bits", "1024");
  EXPECT_THROW(rsa.make_kernels(Backend::kRef, 64, 1), std::invalid_argument);
  EXPECT_THROW(rsa.make_kernels(Backend::kLib, 64, 1), std::invalid_argument);
  rsa.set_param("bits", "4096");
  Bytes sig;
  rsa.make_kernels(Backend::kLib, 64, 1)[0]->process(text("x"), sig);
  EXPECT_EQ(sig.size(), 512u);
}

}  // namespace
}  // namespace dpukit::bench
