// RXPMatch (§4.1.3, the DPI step of IPS and URL filtering; what BlueField-2's
// RXP engine does): match one packet payload against a fixed rule set of
// regular expressions and report which rules match anywhere in it.
//
// One unit of work: one payload (text, `size` bytes) against the first
// `rules` rules of rxp_rules() (regex_ref.cc, version kRuleSetVersion).
// Output: a bitmap of ceil(rules / 8) bytes, bit i % 8 of byte i / 8 set
// when rule i matches somewhere in the payload (semantics in regex_ref.h:
// PCRE syntax subset, ^ = payload start, $ = payload end or before a final
// '\n', . excludes '\n', caseless rules fold ASCII letters only).
// ref: the Pike-VM engine of regex_ref.h. lib: Hyperscan, all rules in one
// block-mode database with HS_FLAG_SINGLEMATCH (plus HS_FLAG_CASELESS for
// caseless rules), one scratch per kernel. dev: DPDK's regexdev exists for
// the RXP on a BlueField-2 (mlx5 regex PMD) but has no software PMD, so there
// is nothing to run it on here.
#include <hs/hs.h>

#include <algorithm>
#include <cstring>

#include "operator.h"
#include "regex_ref.h"

namespace dpukit::bench {
namespace {

using regex_ref::Rule;

uint64_t mix(uint64_t x) {  // splitmix64's finalizer: a reproducible hash
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class RefMatch final : public Kernel {
 public:
  explicit RefMatch(std::shared_ptr<const regex_ref::RuleSet> rules) : rules_(std::move(rules)), matcher_(*rules_) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    out.assign(rules_->bitmap_bytes(), 0);
    matcher_.match(in, out);
  }

 private:
  std::shared_ptr<const regex_ref::RuleSet> rules_;
  regex_ref::Matcher matcher_;
};

struct HsDatabaseDeleter {
  void operator()(hs_database_t* db) const { hs_free_database(db); }
};
struct HsScratchDeleter {
  void operator()(hs_scratch_t* s) const { hs_free_scratch(s); }
};
using HsScratch = std::unique_ptr<hs_scratch_t, HsScratchDeleter>;

class HyperscanMatch final : public Kernel {
 public:
  HyperscanMatch(std::shared_ptr<const hs_database_t> db, HsScratch scratch, size_t rules)
      : db_(std::move(db)), scratch_(std::move(scratch)), bitmap_bytes_((rules + 7) / 8) {}

  void process(std::span<const uint8_t> in, Bytes& out) override {
    out.assign(bitmap_bytes_, 0);
    static const char kNothing = 0;  // hs_scan refuses a null pointer, even for 0 bytes
    const char* data = in.empty() ? &kNothing : reinterpret_cast<const char*>(in.data());
    const hs_error_t e = hs_scan(db_.get(), data,
                                 static_cast<unsigned>(in.size()), 0, scratch_.get(), on_match, out.data());
    if (e != HS_SUCCESS) throw std::runtime_error("rxp_match lib: hs_scan failed with error " + std::to_string(e));
  }

 private:
  // HS_FLAG_SINGLEMATCH: called at most once per rule and scan.
  static int on_match(unsigned id, unsigned long long, unsigned long long, unsigned, void* ctx) {
    static_cast<uint8_t*>(ctx)[id / 8] |= static_cast<uint8_t>(1u << (id % 8));
    return 0;  // keep scanning: the other rules still count
  }

  std::shared_ptr<const hs_database_t> db_;
  HsScratch scratch_;
  size_t bitmap_bytes_;
};

class RxpMatch final : public Operator {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{
        "rxp_match", "security",
        "match one payload against the rxp rule set v" + std::to_string(regex_ref::kRuleSetVersion) + " (" +
            std::to_string(regex_ref::rxp_rules().size()) +
            " IDS/URL-filter regexes); output the bitmap of rules that match anywhere",
        regex_ref::kRuleSetVersion,
        {Backend::kRef, Backend::kLib, Backend::kEngine}};
    return i;
  }
  // BlueField-2's RegEx engine (RXP); the job body is Hyperscan.
  std::optional<EngineWork> engine_work() const override { return EngineWork{EngineKind::kRegex, "", ""}; }

  std::map<std::string, std::string> default_params() const override {
    return {{"rules", std::to_string(regex_ref::rxp_rules().size())}, {"plant", "0.5"}};
  }

  // Text payloads; a fraction `plant` of them (chosen by a hash of seed and
  // index) get 1 to 3 rule samples written over the text, the rules taken in
  // a seeded rotation so that every rule is planted once the payloads are
  // many enough. A sample longer than the payload is skipped; samples may
  // overlap, and the ref backend says what matches in the end.
  std::vector<Bytes> make_inputs(size_t size, size_t count, uint64_t seed) const override {
    const size_t n = active_rules();
    const double plant = plant_fraction();
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[mix(seed ^ (i * 0x51ED27ull)) % i]);
    const auto& rules = regex_ref::rxp_rules();
    std::vector<Bytes> v(count, Bytes(size));
    size_t next_rule = 0;
    for (size_t i = 0; i < count; ++i) {
      fill_text(v[i], seed * 1000003 + i);
      uint64_t h = mix(seed * 0x2545F4914F6CDD1Dull + i);
      if (static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0) >= plant) continue;
      const unsigned samples = 1 + static_cast<unsigned>((h >> 3) % 3);
      for (unsigned k = 0; k < samples; ++k) {
        const Rule& rule = rules[order[next_rule++ % n]];
        // spaces around a sample keep \b at its edges from seeing the text's letters
        std::string framed = rule.place == Rule::Place::kStart ? rule.sample + " "
                             : rule.place == Rule::Place::kEnd ? " " + rule.sample
                                                               : " " + rule.sample + " ";
        if (framed.size() > size) continue;
        h = mix(h);
        const size_t at = rule.place == Rule::Place::kStart ? 0
                          : rule.place == Rule::Place::kEnd ? size - framed.size()
                                                            : h % (size - framed.size() + 1);
        std::memcpy(v[i].data() + at, framed.data(), framed.size());
      }
    }
    return v;
  }

  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t, unsigned threads) const override {
    const size_t n = active_rules();
    const auto& rules = regex_ref::rxp_rules();
    switch (b) {
      case Backend::kRef: {
        std::vector<regex_ref::Pattern> patterns;
        for (size_t i = 0; i < n; ++i) patterns.push_back(rules[i].pattern);
        auto shared = std::make_shared<const regex_ref::RuleSet>(std::move(patterns));
        return kernels_of<RefMatch>(threads, shared);
      }
      case Backend::kLib: return hyperscan_kernels(n, threads);
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: break;
    }
    throw Unavailable(
        "no regexdev on this machine: DPDK's regexdev needs RXP hardware (BlueField-2's mlx5 regex); no software PMD "
        "exists");
  }

  // Names the rules whose bits differ, which says more than a byte offset.
  std::string mismatch(std::span<const uint8_t>, const Bytes& ref_out, const Bytes& got) const override {
    if (ref_out.size() != got.size()) return describe_difference(ref_out, got);
    std::string diff;
    size_t count = 0;
    const auto& rules = regex_ref::rxp_rules();
    for (size_t i = 0; i < ref_out.size() * 8; ++i) {
      const bool want = (ref_out[i / 8] >> (i % 8)) & 1, have = (got[i / 8] >> (i % 8)) & 1;
      if (want == have) continue;
      if (++count <= 4) {
        diff += (diff.empty() ? "" : "; ") + std::string("rule ") + std::to_string(i) + " (" +
                (i < rules.size() ? rules[i].name : std::string("beyond the rule set")) + ") " +
                (want ? "matches in ref but not in the backend" : "matches in the backend but not in ref");
      }
    }
    if (count == 0) return "";
    return std::to_string(count) + " rule bit(s) differ: " + diff + (count > 4 ? "; ..." : "");
  }

 private:
  size_t active_rules() const {
    const uint64_t n = param_u64("rules");
    const size_t all = regex_ref::rxp_rules().size();
    if (n == 0 || n > all)
      throw std::invalid_argument("rxp_match.rules must be 1 to " + std::to_string(all) + ", not " + std::to_string(n));
    return static_cast<size_t>(n);
  }

  double plant_fraction() const {
    const std::string v = param("plant");
    size_t used = 0;
    double f = -1;
    try {
      f = std::stod(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size() || !(f >= 0 && f <= 1))
      throw std::invalid_argument("rxp_match.plant must be a fraction from 0 to 1, not '" + v + "'");
    return f;
  }

  static std::vector<std::unique_ptr<Kernel>> hyperscan_kernels(size_t n, unsigned threads) {
    if (hs_valid_platform() != HS_SUCCESS)
      throw Unavailable("Hyperscan does not run on this CPU (it needs SSSE3)");
    const auto& rules = regex_ref::rxp_rules();
    std::vector<const char*> expressions;
    std::vector<unsigned> flags, ids;
    for (size_t i = 0; i < n; ++i) {
      expressions.push_back(rules[i].pattern.expr.c_str());
      flags.push_back(HS_FLAG_SINGLEMATCH | (rules[i].pattern.caseless ? HS_FLAG_CASELESS : 0u));
      ids.push_back(static_cast<unsigned>(i));
    }
    hs_database_t* raw_db = nullptr;
    hs_compile_error_t* error = nullptr;
    if (hs_compile_multi(expressions.data(), flags.data(), ids.data(), static_cast<unsigned>(n), HS_MODE_BLOCK,
                         nullptr, &raw_db, &error) != HS_SUCCESS) {
      std::string why = error ? error->message : "unknown error";
      const int at = error ? error->expression : -1;
      hs_free_compile_error(error);
      throw std::runtime_error("rxp_match lib: Hyperscan refused " +
                               (at >= 0 ? "rule " + std::to_string(at) + " (" + rules[at].name + ")" : "the rule set") +
                               ": " + why);
    }
    std::shared_ptr<const hs_database_t> db(raw_db, HsDatabaseDeleter{});
    hs_scratch_t* raw_proto = nullptr;
    if (hs_alloc_scratch(raw_db, &raw_proto) != HS_SUCCESS) throw std::runtime_error("rxp_match lib: hs_alloc_scratch failed");
    HsScratch proto(raw_proto);
    std::vector<std::unique_ptr<Kernel>> kernels;
    for (unsigned t = 0; t < threads; ++t) {
      hs_scratch_t* clone = nullptr;
      if (hs_clone_scratch(proto.get(), &clone) != HS_SUCCESS)
        throw std::runtime_error("rxp_match lib: hs_clone_scratch failed");
      kernels.push_back(std::make_unique<HyperscanMatch>(db, HsScratch(clone), n));
    }
    return kernels;
  }
};

}  // namespace

void register_regex_ops(Registry& r) { r.push_back(std::make_unique<RxpMatch>()); }

}  // namespace dpukit::bench
