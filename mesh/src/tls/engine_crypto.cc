#include "tls/engine_crypto.h"

#include <openssl/core.h>
#include <openssl/core_dispatch.h>
#include <openssl/err.h>
#include <openssl/provider.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "dataplane/loop_dilation.h"
#include "dpukit/core/accounting.h"

namespace dpukit::mesh {

namespace {

// The engine's AEAD ciphers as OpenSSL names them (the first of each
// implementation's names), for the spec's "AES-GCM".
constexpr std::array<const char*, 2> kCiphers = {"AES-128-GCM", "AES-256-GCM"};
// kTLS offload: the NIC encrypts and decrypts TLS records inline (the spec's inline:TLS-AES-GCM).
constexpr const char* kSpecAlgorithm = "inline:TLS-AES-GCM";
constexpr const char* kProviderName = "dpukit-engine";
constexpr const char* kProperties = "provider=dpukit-engine,dpukit.engine=yes";
// OSSL_FUNC_CIPHER_NEWCTX (1) .. OSSL_FUNC_CIPHER_SETTABLE_CTX_PARAMS (14): OpenSSL 3.0's cipher functions.
constexpr int kFunctions = OSSL_FUNC_CIPHER_SETTABLE_CTX_PARAMS + 1;

// The default provider's implementation of one cipher: its names (aliases
// and OID included, so that libssl's fetch by any of them finds ours) and
// its functions by id.
struct Delegate {
  std::string names;
  std::array<void (*)(void), kFunctions> fn{};
};
std::array<Delegate, kCiphers.size()> g_delegate;
void* g_default_provctx = nullptr;  // the default provider's context, which its newctx and *able_params take

std::atomic<uint64_t> g_calls{0}, g_bytes{0}, g_hw_ns{0}, g_excluded_ns{0};
uint64_t g_clock_read_ns = 0;

std::mutex g_speed_mu;
DpuSpeed g_speed;

// Spans are timed on core's now_ns(), the monotonic clock (vDSO, the TSC
// here: about 50 ns a read), rather than the thread's CPU clock (a system
// call here: about 0.55 us a read), read twice per record; docs/mesh.md says
// why the difference matters and what a preemption inside a call would do
// (guarded below).

// The time between two back-to-back reads: what timing a call adds to it.
uint64_t measure_clock_read() {
  std::vector<uint64_t> d(2001);
  for (auto& x : d) {
    const uint64_t a = now_ns();
    x = now_ns() - a;
  }
  std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
  return d[d.size() / 2];
}

// A payload call that took longer than this was preempted or interrupted
// (the largest record, 16 KiB, takes about 2.5 us of AES-GCM here): it is
// charged at the rate of the calls that were not.
constexpr uint64_t kPreemptedNs = 50'000;
std::atomic<uint64_t> g_clean_ns{0}, g_clean_bytes{0}, g_preempted{0};

// Charges `spent` ns of the calling thread's time, over which `bytes` of
// payload went through the engine, to the engine (hw), and keeps it out of
// the calling loop's dilation.
void charge(uint64_t spent, size_t bytes) {
  uint64_t hw = spent > g_clock_read_ns ? spent - g_clock_read_ns : 0;
  if (spent > kPreemptedNs) {
    g_preempted.fetch_add(1, std::memory_order_relaxed);
    const uint64_t ns = g_clean_ns.load(std::memory_order_relaxed), b = g_clean_bytes.load(std::memory_order_relaxed);
    if (b > 0) hw = std::min(hw, static_cast<uint64_t>(static_cast<double>(ns) / static_cast<double>(b) * bytes));
  } else {
    g_clean_ns.fetch_add(hw, std::memory_order_relaxed);
    g_clean_bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  const uint64_t excluded = hw + std::min(spent, g_clock_read_ns);
  if (LoopDilation* d = LoopDilation::current()) d->exclude(excluded);
  g_calls.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(bytes, std::memory_order_relaxed);
  g_hw_ns.fetch_add(hw, std::memory_order_relaxed);
  g_excluded_ns.fetch_add(excluded, std::memory_order_relaxed);
}

// A TLS 1.3 record is several calls on one context: the nonce (an init with
// an IV and no key), the tag to check (opening), the AAD, the payload, and
// the final (the tag). The whole of it is the engine's, so it is timed as
// one span, from the nonce's init to the end of the final: two clock reads
// per record. Between those calls libssl only writes the 5-byte record
// header that is the AAD. A payload call outside a span (TLS 1.2's AES-GCM
// does a record in one call, nonce and tag included) is timed alone.
struct Span {
  const void* ctx = nullptr;
  uint64_t t0 = 0;
  size_t bytes = 0;
};
thread_local Span t_span;

void open_span(const void* c) { t_span = Span{c, now_ns(), 0}; }

template <typename Call>
int in_span_or_timed(const void* c, size_t bytes, Call&& call) {
  if (t_span.ctx == c) {
    t_span.bytes += bytes;
    return call();
  }
  const uint64_t t0 = now_ns();
  const int r = call();
  charge(now_ns() - t0, bytes);
  return r;
}

void close_span(const void* c) {
  if (t_span.ctx != c) return;
  charge(now_ns() - t_span.t0, t_span.bytes);
  t_span = Span{};
}

template <size_t I, int Id, typename Fn>
Fn* fn() {
  return reinterpret_cast<Fn*>(g_delegate[I].fn[Id]);
}

// The provider's functions for cipher I: each calls the default's; those
// that take the provider's context get the default provider's.
template <size_t I>
struct Wrap {
  static void* newctx(void*) { return fn<I, OSSL_FUNC_CIPHER_NEWCTX, OSSL_FUNC_cipher_newctx_fn>()(g_default_provctx); }
  // A key (a connection's, set once) is the handshake's; a nonce alone opens a record's span.
  static int encrypt_init(void* c, const unsigned char* key, size_t keylen, const unsigned char* iv, size_t ivlen,
                          const OSSL_PARAM params[]) {
    if (key == nullptr && iv != nullptr) open_span(c);
    return fn<I, OSSL_FUNC_CIPHER_ENCRYPT_INIT, OSSL_FUNC_cipher_encrypt_init_fn>()(c, key, keylen, iv, ivlen, params);
  }
  static int decrypt_init(void* c, const unsigned char* key, size_t keylen, const unsigned char* iv, size_t ivlen,
                          const OSSL_PARAM params[]) {
    if (key == nullptr && iv != nullptr) open_span(c);
    return fn<I, OSSL_FUNC_CIPHER_DECRYPT_INIT, OSSL_FUNC_cipher_decrypt_init_fn>()(c, key, keylen, iv, ivlen, params);
  }
  // A record's payload (out given); the AAD (out NULL) is timed only within a record's span.
  static int update(void* c, unsigned char* out, size_t* outl, size_t outsize, const unsigned char* in, size_t inl) {
    auto* f = fn<I, OSSL_FUNC_CIPHER_UPDATE, OSSL_FUNC_cipher_update_fn>();
    if (out == nullptr || inl == 0) return f(c, out, outl, outsize, in, inl);
    return in_span_or_timed(c, inl, [&] { return f(c, out, outl, outsize, in, inl); });
  }
  static int final(void* c, unsigned char* out, size_t* outl, size_t outsize) {
    const int r = fn<I, OSSL_FUNC_CIPHER_FINAL, OSSL_FUNC_cipher_final_fn>()(c, out, outl, outsize);
    close_span(c);
    return r;
  }
  static int cipher(void* c, unsigned char* out, size_t* outl, size_t outsize, const unsigned char* in, size_t inl) {
    auto* f = fn<I, OSSL_FUNC_CIPHER_CIPHER, OSSL_FUNC_cipher_cipher_fn>();
    if (out == nullptr || inl == 0) return f(c, out, outl, outsize, in, inl);
    return in_span_or_timed(c, inl, [&] { return f(c, out, outl, outsize, in, inl); });
  }
  static void freectx(void* c) {
    if (t_span.ctx == c) t_span = Span{};  // a record that never finished
    fn<I, OSSL_FUNC_CIPHER_FREECTX, OSSL_FUNC_cipher_freectx_fn>()(c);
  }
  static void* dupctx(void* c) { return fn<I, OSSL_FUNC_CIPHER_DUPCTX, OSSL_FUNC_cipher_dupctx_fn>()(c); }
  static int get_params(OSSL_PARAM params[]) {
    return fn<I, OSSL_FUNC_CIPHER_GET_PARAMS, OSSL_FUNC_cipher_get_params_fn>()(params);
  }
  static int get_ctx_params(void* c, OSSL_PARAM params[]) {
    return fn<I, OSSL_FUNC_CIPHER_GET_CTX_PARAMS, OSSL_FUNC_cipher_get_ctx_params_fn>()(c, params);
  }
  static int set_ctx_params(void* c, const OSSL_PARAM params[]) {
    return fn<I, OSSL_FUNC_CIPHER_SET_CTX_PARAMS, OSSL_FUNC_cipher_set_ctx_params_fn>()(c, params);
  }
  static const OSSL_PARAM* gettable_params(void*) {
    return fn<I, OSSL_FUNC_CIPHER_GETTABLE_PARAMS, OSSL_FUNC_cipher_gettable_params_fn>()(g_default_provctx);
  }
  static const OSSL_PARAM* gettable_ctx_params(void* c, void*) {
    return fn<I, OSSL_FUNC_CIPHER_GETTABLE_CTX_PARAMS, OSSL_FUNC_cipher_gettable_ctx_params_fn>()(c, g_default_provctx);
  }
  static const OSSL_PARAM* settable_ctx_params(void* c, void*) {
    return fn<I, OSSL_FUNC_CIPHER_SETTABLE_CTX_PARAMS, OSSL_FUNC_cipher_settable_ctx_params_fn>()(c, g_default_provctx);
  }

  // Only the functions the default's implementation has.
  static const OSSL_DISPATCH* dispatch() {
    static const std::vector<OSSL_DISPATCH> table = [] {
      using F = void (*)(void);
      const std::pair<int, F> all[] = {
          {OSSL_FUNC_CIPHER_NEWCTX, reinterpret_cast<F>(newctx)},
          {OSSL_FUNC_CIPHER_ENCRYPT_INIT, reinterpret_cast<F>(encrypt_init)},
          {OSSL_FUNC_CIPHER_DECRYPT_INIT, reinterpret_cast<F>(decrypt_init)},
          {OSSL_FUNC_CIPHER_UPDATE, reinterpret_cast<F>(update)},
          {OSSL_FUNC_CIPHER_FINAL, reinterpret_cast<F>(final)},
          {OSSL_FUNC_CIPHER_CIPHER, reinterpret_cast<F>(cipher)},
          {OSSL_FUNC_CIPHER_FREECTX, reinterpret_cast<F>(freectx)},
          {OSSL_FUNC_CIPHER_DUPCTX, reinterpret_cast<F>(dupctx)},
          {OSSL_FUNC_CIPHER_GET_PARAMS, reinterpret_cast<F>(get_params)},
          {OSSL_FUNC_CIPHER_GET_CTX_PARAMS, reinterpret_cast<F>(get_ctx_params)},
          {OSSL_FUNC_CIPHER_SET_CTX_PARAMS, reinterpret_cast<F>(set_ctx_params)},
          {OSSL_FUNC_CIPHER_GETTABLE_PARAMS, reinterpret_cast<F>(gettable_params)},
          {OSSL_FUNC_CIPHER_GETTABLE_CTX_PARAMS, reinterpret_cast<F>(gettable_ctx_params)},
          {OSSL_FUNC_CIPHER_SETTABLE_CTX_PARAMS, reinterpret_cast<F>(settable_ctx_params)},
      };
      std::vector<OSSL_DISPATCH> t;
      for (const auto& [id, f] : all)
        if (g_delegate[I].fn[id] != nullptr) t.push_back({id, f});
      t.push_back({0, nullptr});
      return t;
    }();
    return table.data();
  }
};

const OSSL_ALGORITHM* query(void*, int operation, int* no_store) {
  *no_store = 0;
  static const std::array<OSSL_ALGORITHM, kCiphers.size() + 1> algorithms = {
      OSSL_ALGORITHM{g_delegate[0].names.c_str(), kProperties, Wrap<0>::dispatch(), "AES-128-GCM on the crypto engine"},
      OSSL_ALGORITHM{g_delegate[1].names.c_str(), kProperties, Wrap<1>::dispatch(), "AES-256-GCM on the crypto engine"},
      OSSL_ALGORITHM{nullptr, nullptr, nullptr, nullptr}};
  return operation == OSSL_OP_CIPHER ? algorithms.data() : nullptr;
}

int provider_init(const OSSL_CORE_HANDLE*, const OSSL_DISPATCH*, const OSSL_DISPATCH** out, void** provctx) {
  static const OSSL_DISPATCH kProvider[] = {
      {OSSL_FUNC_PROVIDER_QUERY_OPERATION, reinterpret_cast<void (*)(void)>(query)}, {0, nullptr}};
  *out = kProvider;
  *provctx = nullptr;
  return 1;
}

std::string openssl_reason() {
  const unsigned long e = ERR_peek_last_error();
  ERR_clear_error();
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

OSSL_LIB_CTX* make_libctx() {
  OSSL_LIB_CTX* libctx = OSSL_LIB_CTX_new();
  if (libctx == nullptr) throw std::runtime_error("crypto engine: OSSL_LIB_CTX_new: " + openssl_reason());
  OSSL_PROVIDER* def = OSSL_PROVIDER_load(libctx, "default");
  if (def == nullptr) throw std::runtime_error("crypto engine: cannot load OpenSSL's default provider: " + openssl_reason());
  int no_store = 0;
  const OSSL_ALGORITHM* algs = OSSL_PROVIDER_query_operation(def, OSSL_OP_CIPHER, &no_store);
  for (const OSSL_ALGORITHM* a = algs; a != nullptr && a->algorithm_names != nullptr; ++a) {
    const std::string names = a->algorithm_names;
    const std::string first = names.substr(0, names.find(':'));
    for (size_t i = 0; i < kCiphers.size(); ++i) {
      if (first != kCiphers[i] || !g_delegate[i].names.empty()) continue;
      g_delegate[i].names = names;
      for (const OSSL_DISPATCH* d = a->implementation; d->function_id != 0; ++d)
        if (d->function_id > 0 && d->function_id < kFunctions) g_delegate[i].fn[d->function_id] = d->function;
    }
  }
  OSSL_PROVIDER_unquery_operation(def, OSSL_OP_CIPHER, algs);
  for (size_t i = 0; i < kCiphers.size(); ++i)
    if (g_delegate[i].names.empty() || !g_delegate[i].fn[OSSL_FUNC_CIPHER_NEWCTX])
      throw std::runtime_error(std::string("crypto engine: OpenSSL's default provider has no ") + kCiphers[i]);
  g_default_provctx = OSSL_PROVIDER_get0_provider_ctx(def);
  g_clock_read_ns = measure_clock_read();
  if (OSSL_PROVIDER_add_builtin(libctx, kProviderName, provider_init) != 1 ||
      OSSL_PROVIDER_load(libctx, kProviderName) == nullptr)
    throw std::runtime_error("crypto engine: cannot load the engine's provider: " + openssl_reason());
  return libctx;
}

std::once_flag g_once;
OSSL_LIB_CTX* g_libctx = nullptr;
std::atomic<bool> g_made{false};

}  // namespace

OSSL_LIB_CTX* engine_libctx() {
  std::call_once(g_once, [] {
    g_libctx = make_libctx();
    g_made.store(true, std::memory_order_release);
  });
  return g_libctx;
}

bool engine_crypto_in_use() { return g_made.load(std::memory_order_acquire); }

uint64_t engine_clock_read_ns() { return g_clock_read_ns; }

EngineCryptoTotals engine_crypto_totals() {
  return {g_calls.load(std::memory_order_relaxed), g_bytes.load(std::memory_order_relaxed),
          g_hw_ns.load(std::memory_order_relaxed), g_excluded_ns.load(std::memory_order_relaxed),
          g_preempted.load(std::memory_order_relaxed)};
}

void set_record_crypto_speed(const DpuSpeed& speed) {
  std::lock_guard lock(g_speed_mu);
  g_speed = speed;
}

DpuSpeed record_crypto_speed() {
  std::lock_guard lock(g_speed_mu);
  return g_speed;
}

const EngineSpec& record_crypto_engine(const DpuSpeed& speed) {
  std::string generation;
  try {
    generation = engine_generation(speed);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("ENGINE needs the dpu speed of a BlueField generation (--dpu-speed bluefield2 or "
                             "bluefield3), not '" + speed.name + "': " + e.what());
  }
  try {
    const EngineSpec& spec = engine_spec(generation, EngineKind::kBulkCrypto);
    if (std::find(spec.algorithms.begin(), spec.algorithms.end(), kSpecAlgorithm) == spec.algorithms.end())
      throw std::runtime_error("ENGINE: " + generation + "'s " + spec.name + " does not run TLS records (" +
                               kSpecAlgorithm + ")");
    return spec;
  } catch (const EngineUnavailable& e) {
    throw std::runtime_error(std::string("ENGINE: ") + e.what());
  }
}

}  // namespace dpukit::mesh
