// rxp_match: the ref regex engine on hand-made cases per syntax feature,
// against std::regex (ECMAScript) as an independent oracle for every rule,
// and Hyperscan (the lib backend) against the ref on many payloads.
//
// No published test vectors exist for "this rule set on these payloads"; the
// expected outcomes of the hand-made cases below are reasoned out from the
// semantics documented in regex_ref.h (PCRE's, which Hyperscan follows), and
// each hand-made case is also run through Hyperscan itself.
#include <hs/hs.h>

#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "operator.h"
#include "regex_ref.h"

namespace dpukit::bench {
namespace {

using regex_ref::Pattern;
using regex_ref::PatternError;
using regex_ref::Rule;

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

struct Rng {  // splitmix64
  uint64_t x;
  uint64_t next() {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n ? next() % n : 0; }
};

// Hyperscan on one pattern, as the lib backend compiles rules; nullopt when
// Hyperscan refuses the pattern (it refuses those that match the empty text).
std::optional<bool> hyperscan_matches(const Pattern& p, const std::string& text) {
  hs_database_t* db = nullptr;
  hs_compile_error_t* error = nullptr;
  const unsigned flags = HS_FLAG_SINGLEMATCH | (p.caseless ? HS_FLAG_CASELESS : 0u);
  if (hs_compile(p.expr.c_str(), flags, HS_MODE_BLOCK, nullptr, &db, &error) != HS_SUCCESS) {
    hs_free_compile_error(error);
    return std::nullopt;
  }
  hs_scratch_t* scratch = nullptr;
  EXPECT_EQ(hs_alloc_scratch(db, &scratch), HS_SUCCESS);
  bool matched = false;
  auto on_match = [](unsigned, unsigned long long, unsigned long long, unsigned, void* ctx) -> int {
    *static_cast<bool*>(ctx) = true;
    return 1;  // one match is enough
  };
  hs_scan(db, text.data(), static_cast<unsigned>(text.size()), 0, scratch, on_match, &matched);
  hs_free_scratch(scratch);
  hs_free_database(db);
  return matched;
}

struct Case {
  const char* expr;
  bool caseless;
  std::string text;
  bool match;
};

const bool kCi = true, kCs = false;

// Expected outcomes reasoned out by hand from the documented semantics.
const std::vector<Case>& hand_cases() {
  static const std::vector<Case> cases = {
      // literals: a substring anywhere
      {"abc", kCs, "xxabcxx", true},
      {"abc", kCs, "ab c", false},
      {"abc", kCs, "", false},
      {"abc", kCs, "ABC", false},
      // escapes
      {R"(a\.b)", kCs, "a.b", true},
      {R"(a\.b)", kCs, "axb", false},
      {R"(\x41\x00B)", kCs, std::string("A\0B", 3), true},
      {R"(\x41\x00B)", kCs, "A0B", false},
      {R"(a\tb)", kCs, "a\tb", true},
      {R"(\/\?\*)", kCs, "x/?*", true},
      {R"(\xff\x80)", kCs, "\xff\x80", true},
      // classes
      {"[a-c]x", kCs, "bx", true},
      {"[a-c]x", kCs, "dx", false},
      {"[^a-c]x", kCs, "dx", true},
      {"[^a-c]x", kCs, "ax", false},
      {"[-a]z", kCs, "-z", true},
      {"[a-]z", kCs, "-z", true},
      {"[a-]z", kCs, "bz", false},
      {R"([\d.]+z)", kCs, "1.2z", true},
      {R"([\]]x)", kCs, "]x", true},
      {R"(a[^\n]b)", kCs, "a\nb", false},
      {R"([\x80-\xff])", kCs, "\x7f", false},
      {R"([\x80-\xff])", kCs, "a\x80", true},
      {R"([^\x00-\x7f])", kCs, "\xe9", true},
      // shorthand classes
      {R"(\d\d)", kCs, "a12", true},
      {R"(\d\d)", kCs, "a1b2", false},
      {R"(\w+@)", kCs, "x_1@", true},
      {R"(\W)", kCs, "abc_9", false},
      {R"(\w)", kCs, "\xe9", false},  // \w is ASCII only
      {R"(a\sb)", kCs, "a\vb", true},  // \s includes VT, as in PCRE >= 8.34 and Hyperscan
      {R"(a\sb)", kCs, "a\xa0" "b", false},
      {R"(\S)", kCs, " \t\r\n\f\v", false},
      {R"(\D\D)", kCs, "1a2b", false},
      // dot: any byte but '\n'
      {"a.c", kCs, "abc", true},
      {"a.c", kCs, "a\nc", false},
      {"a.c", kCs, "a\rc", true},
      {"a.c", kCs, "a\xff" "c", true},
      // alternation
      {"cat|dog", kCs, "hotdog", true},
      {"cat|dog", kCs, "cow", false},
      {"x(a|b|)y", kCs, "xy", true},
      {"x(a|b|)y", kCs, "xcy", false},
      {"x(?:ab|cd)+y", kCs, "xabcdaby", true},
      {"x(?:ab|cd)+y", kCs, "xacy", false},
      // repeats
      {"ab*c", kCs, "ac", true},
      {"ab+c", kCs, "ac", false},
      {"ab?c", kCs, "abbc", false},
      {"a{3}", kCs, "aa", false},
      {"a{3}", kCs, "baaab", true},
      {"xa{2,3}y", kCs, "xaaaay", false},
      {"xa{2,3}y", kCs, "xaaay", true},
      {"xa{2,3}y", kCs, "xay", false},
      {"xa{2,}y", kCs, "xaaaaaaay", true},
      {"xa{2,}y", kCs, "xay", false},
      {"x(ab){2}y", kCs, "xababy", true},
      {"x(ab){2}y", kCs, "xabxaby", false},
      {"x(ab){0,1}y", kCs, "xy", true},
      {"(a*)*b", kCs, "aaab", true},
      {"(a|)*b", kCs, "c", false},
      {"x(a*|b)+y", kCs, "xabaabby", true},
      // anchors: ^ only at the start of the text, $ at its end or before a final '\n'
      {"^abc", kCs, "abcd", true},
      {"^abc", kCs, "xabc", false},
      {"^abc", kCs, "x\nabc", false},  // no multiline mode
      {"abc$", kCs, "xabc", true},
      {"abc$", kCs, "abc\n", true},
      {"abc$", kCs, "abc\n\n", false},
      {"abc$", kCs, "abc\r", false},
      {"abc$", kCs, "abcd", false},
      {"abc$", kCs, "abc\nx", false},
      {"^abc$", kCs, "abc", true},
      {"(^|/)x", kCs, "a/x", true},
      {"(^|/)x", kCs, "xa", true},
      {"(^|/)x", kCs, "ax", false},
      {"^$", kCs, "", true},
      {"^$", kCs, "\n", true},
      {"^$", kCs, "a", false},
      {"a^b", kCs, "ab", false},
      // word boundaries: \w bytes against the rest and the outside of the text
      {R"(\bfoo\b)", kCs, "a foo.", true},
      {R"(\bfoo\b)", kCs, "foobar", false},
      {R"(\bfoo\b)", kCs, "foo", true},
      {R"(\bfoo)", kCs, "_foo", false},
      {R"(\Bfoo)", kCs, "xfoo", true},
      {R"(\Bfoo)", kCs, " foo", false},
      {R"(a\b)", kCs, "a", true},
      {R"(\d+\b)", kCs, "12ab", false},
      // caseless: ASCII letters fold in literals, classes, ranges and \xHH
      {"select", kCi, "SeLeCt", true},
      {"select", kCs, "SELECT", false},
      {"[a-c]x", kCi, "BX", true},
      {"[A-C]x", kCi, "bX", true},
      {"[^a]b", kCi, "Ab", false},
      {"[^a]b", kCi, "cB", true},
      {R"(\x41)", kCi, "a", true},
      {R"(a\dc)", kCi, "A1C", true},
      {R"(\xe9)", kCi, "\xc9", false},  // no folding outside ASCII
      {"k", kCi, "\xe2\x84\xaa", false},  // nor Unicode's Kelvin sign
      // empty matches (Hyperscan refuses these patterns; the ref answers them)
      {"a*", kCs, "", true},
      {"x?", kCs, "zzz", true},
  };
  return cases;
}

TEST(RegexRef, HandMadeCasesPerFeature) {
  for (const Case& c : hand_cases()) {
    EXPECT_EQ(regex_ref::matches({c.expr, c.caseless}, c.text), c.match)
        << "pattern " << c.expr << (c.caseless ? " (caseless)" : "") << " on '" << c.text << "'";
  }
}

TEST(RegexRef, HyperscanAgreesOnHandMadeCases) {
  // Hyperscan refuses unanchored patterns that match the empty text (it
  // takes ^$, which can match only at the start) and a ^ after a byte
  // ("embedded start anchors not supported")
  const std::set<std::string> refused = {"a*", "x?", "a^b"};
  for (const Case& c : hand_cases()) {
    const std::optional<bool> hs = hyperscan_matches({c.expr, c.caseless}, c.text);
    if (refused.count(c.expr)) {
      EXPECT_FALSE(hs.has_value()) << "Hyperscan took " << c.expr;
      continue;
    }
    ASSERT_TRUE(hs.has_value()) << "Hyperscan refused " << c.expr;
    EXPECT_EQ(*hs, c.match) << "Hyperscan on pattern " << c.expr << (c.caseless ? " (caseless)" : "") << " and '"
                            << c.text << "'";
  }
}

TEST(RegexRef, LinearTimeOnPatternsThatMakeBacktrackersExplode) {
  // (a*)*b and (x+x+)+y on long runs without the final byte take exponential
  // time in a backtracking engine; the Pike simulation is linear in the text.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(regex_ref::matches({"(a*)*b", false}, std::string(20000, 'a')));
  EXPECT_FALSE(regex_ref::matches({"(x+x+)+y", false}, std::string(20000, 'x')));
  EXPECT_TRUE(regex_ref::matches({"(x+x+)+y", false}, std::string(20000, 'x') + "y"));
  EXPECT_FALSE(regex_ref::matches({"a{1000}", false}, std::string(999, 'a')));
  EXPECT_TRUE(regex_ref::matches({"a{1000}", false}, std::string(1000, 'a')));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(RegexRef, RefusesMalformedAndUnsupportedPatterns) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"a(b", "missing ')'"},
      {"a)b", "unmatched ')'"},
      {"[abc", "missing ']'"},
      {"*a", "nothing to repeat"},
      {"a|+", "nothing to repeat"},
      {"^*", "assertion cannot be repeated"},
      {R"(\b+)", "assertion cannot be repeated"},
      {"a**", "quantifier cannot follow"},
      {"a{2}{3}", "quantifier cannot follow"},
      {"a*?", "lazy quantifiers"},
      {"a++", "possessive quantifiers"},
      {"(?=a)b", "'(?' other than '(?:'"},
      {"(?i)abc", "'(?' other than '(?:'"},
      {"(?<n>a)", "'(?' other than '(?:'"},
      {R"((a)\1)", "backreferences"},
      {R"(\Aabc)", "unsupported escape \\A"},
      {R"(abc\z)", "unsupported escape \\z"},
      {R"(\p{L})", "unsupported escape \\p"},
      {R"(\Qa.b\E)", "unsupported escape \\Q"},
      {"[[:alpha:]]", "POSIX classes"},
      {"a{2,1}", "m < n"},
      {"a{1001}", "above 1000"},
      {"a{,3}", "escaped as \\{"},
      {"a{x}", "escaped as \\{"},
      {"a{2", "not closed"},
      {"{2}", "nothing to repeat"},
      {"a]", "unescaped ']'"},
      {"a}", "unescaped '}'"},
      {"[z-a]", "out of order"},
      {R"([\d-z])", "cannot start at a class escape"},
      {R"([a-\d])", "cannot end at a class escape"},
      {"[]a]", "ambiguous"},
      {"[^]a]", "ambiguous"},
      {R"([\b])", "\\b inside a class"},
      {R"(\x4)", "two hex digits"},
      {R"(\x{41})", "two hex digits"},
      {"abc\\", "trailing backslash"},
      {"a\tb", "byte 0x09 written directly"},
      {"caf\xc3\xa9", "byte 0xc3 written directly"},
      {"(a{1000}){1000}", "NFA states"},
      {std::string(300, '(') + "a" + std::string(300, ')'), "nested deeper"},
  };
  for (const auto& [expr, why] : bad) {
    try {
      regex_ref::RuleSet rules({{expr, false}});
      ADD_FAILURE() << "accepted '" << expr << "'";
    } catch (const PatternError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(why), std::string::npos) << "for '" << expr << "': " << msg;
      EXPECT_NE(msg.find("regex '" + expr + "'"), std::string::npos) << msg;
    }
  }
  // the message names the pattern that failed among several
  try {
    regex_ref::RuleSet rules({{"good", false}, {"bad(", true}});
    ADD_FAILURE() << "accepted bad(";
  } catch (const PatternError& e) {
    EXPECT_NE(std::string(e.what()).find("regex 'bad(' (caseless) at offset 3"), std::string::npos) << e.what();
  }
}

TEST(RegexRuleSet, EveryRuleCompilesAndMatchesItsSample) {
  const auto& rules = regex_ref::rxp_rules();
  EXPECT_GE(rules.size(), 30u);
  EXPECT_LE(rules.size(), 100u);
  std::set<std::string> names;
  std::vector<Pattern> patterns;
  for (const Rule& r : rules) {
    EXPECT_TRUE(names.insert(r.name).second) << "duplicate rule name " << r.name;
    patterns.push_back(r.pattern);
    EXPECT_TRUE(regex_ref::matches(r.pattern, r.sample)) << r.name;
    // framed as make_inputs plants it, inside text
    const std::string framed = r.place == Rule::Place::kStart ? r.sample + " login error"
                               : r.place == Rule::Place::kEnd ? "GET the " + r.sample
                                                              : "the value " + r.sample + " user id";
    EXPECT_TRUE(regex_ref::matches(r.pattern, framed)) << r.name << " in '" << framed << "'";
    EXPECT_FALSE(regex_ref::matches(r.pattern, "")) << r.name << " matches the empty text";
    EXPECT_EQ(hyperscan_matches(r.pattern, framed), std::optional<bool>(true)) << r.name;
  }
  EXPECT_NO_THROW(regex_ref::RuleSet{patterns});
}

// Rewrites a pattern of the subset into ECMAScript with the same meaning:
// '.' excludes only '\n' here but also '\r' in ECMAScript, and '$' also
// matches before a final '\n' here. Everything else means the same in both.
std::string to_ecmascript(const std::string& expr) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < expr.size(); ++i) {
    const char c = expr[i];
    if (c == '\\' && i + 1 < expr.size()) {
      out += expr.substr(i, 2);
      ++i;
    } else if (in_class) {
      if (c == ']') in_class = false;
      out += c;
    } else if (c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < expr.size() && expr[i + 1] == '^') out += expr[++i];
    } else if (c == '.') {
      out += "[^\\n]";
    } else if (c == '$') {
      out += "(?=\\n?$)";
    } else {
      out += c;
    }
  }
  return out;
}

// Texts around a rule's sample: mutated (deleted, inserted, replaced or
// case-flipped bytes), cut, framed by text or by bytes from a small alphabet,
// sometimes with a final '\n' or '\r', so that both outcomes occur.
std::string text_near(const Rule& rule, Rng& rng) {
  static const std::string alphabet = "aAzZ09_ -./:=%?&@'\n\r\t\x01\x90\xff";
  auto noise = [&](size_t max) {
    std::string s;
    const size_t n = rng.below(max + 1);
    if (rng.below(2)) {
      Bytes t(n);
      fill_text(t, rng.next());
      s.assign(t.begin(), t.end());
    } else {
      for (size_t i = 0; i < n; ++i) s += alphabet[rng.below(alphabet.size())];
    }
    return s;
  };
  std::string core = rule.sample;
  const size_t mutations = rng.below(4);
  for (size_t m = 0; m < mutations && !core.empty(); ++m) {
    const size_t at = rng.below(core.size());
    switch (rng.below(5)) {
      case 0: core.erase(at, 1); break;
      case 1: core.insert(core.begin() + static_cast<long>(at), alphabet[rng.below(alphabet.size())]); break;
      case 2: core[at] = alphabet[rng.below(alphabet.size())]; break;
      case 3:
        if (std::isalpha(static_cast<unsigned char>(core[at]))) core[at] ^= 0x20;
        break;
      case 4: core = core.substr(0, at); break;
    }
  }
  if (rng.below(8) == 0) core = noise(40);  // sometimes nothing of the sample
  const bool at_start = rule.place == Rule::Place::kStart ? rng.below(4) != 0 : rng.below(4) == 0;
  const bool at_end = rule.place == Rule::Place::kEnd ? rng.below(4) != 0 : rng.below(4) == 0;
  std::string text = (at_start ? "" : noise(60)) + core + (at_end ? "" : noise(60));
  switch (rng.below(6)) {
    case 0: text += '\n'; break;
    case 1: text += "\n\n"; break;
    case 2: text += '\r'; break;
    default: break;
  }
  return text;
}

TEST(RegexRuleSet, RefAgreesWithStdRegexOnEveryRule) {
  Rng rng{42};
  constexpr size_t kTexts = 300;
  for (const Rule& rule : regex_ref::rxp_rules()) {
    auto flags = std::regex::ECMAScript;
    if (rule.pattern.caseless) flags |= std::regex::icase;
    const std::string ecma = to_ecmascript(rule.pattern.expr);
    const std::regex oracle(ecma, flags);
    regex_ref::RuleSet one({rule.pattern});
    regex_ref::Matcher matcher(one);
    size_t matched = 0;
    for (size_t i = 0; i < kTexts; ++i) {
      const std::string text = text_near(rule, rng);
      uint8_t bit = 0;
      matcher.match(bytes_of(text), std::span(&bit, 1));
      const bool want = std::regex_search(text, oracle);
      ASSERT_EQ(bit != 0, want) << rule.name << " /" << rule.pattern.expr << "/ as ECMAScript /" << ecma
                                << "/ on '" << hex(bytes_of(text), 200) << "'";
      matched += want;
    }
    // both outcomes, or the comparison says little about this rule
    EXPECT_GT(matched, 0u) << rule.name;
    EXPECT_LT(matched, kTexts) << rule.name;
  }
}

// Resets the operator's parameters when a test ends (the registry's
// operators are shared by every test).
struct ParamsGuard {
  Operator& op;
  explicit ParamsGuard(Operator& o) : op(o) { op.reset_params(); }
  ~ParamsGuard() { op.reset_params(); }
};

bool bit(const Bytes& bitmap, size_t i) { return (bitmap[i / 8] >> (i % 8)) & 1; }

TEST(RegexOperator, HyperscanEqualsRefOnPayloads) {
  Operator& op = find_operator("rxp_match");
  ParamsGuard guard(op);
  const size_t rules = regex_ref::rxp_rules().size();
  auto ref = op.make_kernels(Backend::kRef, 0, 1);
  auto lib = op.make_kernels(Backend::kLib, 0, 2);
  ASSERT_EQ(lib.size(), 2u);
  Bytes want, got;
  auto compare = [&](const std::vector<Bytes>& inputs, const std::string& what) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      ref[0]->process(inputs[i], want);
      ASSERT_EQ(want.size(), (rules + 7) / 8);
      for (auto& k : lib) {
        k->process(inputs[i], got);
        ASSERT_EQ(op.mismatch(inputs[i], want, got), "") << what << " input " << i << ": " << hex(inputs[i], 80);
      }
    }
  };
  for (size_t size : {1, 7, 64, 256, 1024, 1500})
    for (uint64_t seed : {1, 2}) compare(op.make_inputs(size, 128, seed), "text of " + std::to_string(size) + "B");
  std::vector<Bytes> random(200, Bytes(512));
  for (size_t i = 0; i < random.size(); ++i) fill_random(random[i], 77 + i);
  compare(random, "random bytes");
  // the oracle's texts, many of them near a match
  Rng rng{7};
  std::vector<Bytes> near;
  for (int round = 0; round < 20; ++round)
    for (const Rule& r : regex_ref::rxp_rules()) {
      std::string t = text_near(r, rng);
      near.emplace_back(t.begin(), t.end());
    }
  compare(near, "text near a rule's sample");
}

TEST(RegexOperator, OutcomesVaryAcrossPayloads) {
  Operator& op = find_operator("rxp_match");
  ParamsGuard guard(op);
  const size_t rules = regex_ref::rxp_rules().size();
  auto ref = op.make_kernels(Backend::kRef, 1024, 1);
  const auto inputs = op.make_inputs(1024, 256, 1);
  std::vector<size_t> hits(rules);
  std::set<Bytes> distinct;
  Bytes out;
  for (const Bytes& in : inputs) {
    ref[0]->process(in, out);
    distinct.insert(out);
    for (size_t r = 0; r < rules; ++r) hits[r] += bit(out, r);
  }
  for (size_t r = 0; r < rules; ++r) {
    EXPECT_GT(hits[r], 0u) << "rule " << regex_ref::rxp_rules()[r].name << " never matches";
    EXPECT_LT(hits[r], inputs.size()) << "rule " << regex_ref::rxp_rules()[r].name << " always matches";
  }
  EXPECT_GT(distinct.size(), 50u);
}

TEST(RegexOperator, PlantParameterSetsTheFractionOfPlantedPayloads) {
  Operator& op = find_operator("rxp_match");
  ParamsGuard guard(op);
  auto planted = [&](size_t count) {
    const auto inputs = op.make_inputs(1024, count, 3);
    size_t n = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      Bytes text(1024);
      fill_text(text, 3 * 1000003 + i);
      n += inputs[i] != text;
    }
    return n;
  };
  EXPECT_EQ(op.make_inputs(256, 64, 5), op.make_inputs(256, 64, 5));  // reproducible
  EXPECT_NE(op.make_inputs(256, 64, 5), op.make_inputs(256, 64, 6));
  const size_t half = planted(1000);
  EXPECT_GT(half, 420u);
  EXPECT_LT(half, 580u);
  op.set_param("plant", "0");
  EXPECT_EQ(planted(200), 0u);
  op.set_param("plant", "1");
  EXPECT_EQ(planted(200), 200u);  // every sample fits in 1024 bytes
  op.set_param("plant", "1.5");
  EXPECT_THROW(op.make_inputs(64, 1, 1), std::invalid_argument);
  op.set_param("plant", "half");
  EXPECT_THROW(op.make_inputs(64, 1, 1), std::invalid_argument);
}

TEST(RegexOperator, RulesParameterMatchesAPrefixOfTheRuleSet) {
  Operator& op = find_operator("rxp_match");
  ParamsGuard guard(op);
  const auto inputs = op.make_inputs(1024, 64, 9);
  auto full = op.make_kernels(Backend::kRef, 1024, 1);
  op.set_param("rules", "10");
  auto ref = op.make_kernels(Backend::kRef, 1024, 1);
  auto lib = op.make_kernels(Backend::kLib, 1024, 1);
  Bytes all, want, got;
  for (const Bytes& in : inputs) {
    full[0]->process(in, all);
    ref[0]->process(in, want);
    lib[0]->process(in, got);
    ASSERT_EQ(want.size(), 2u);
    EXPECT_EQ(op.mismatch(in, want, got), "");
    for (size_t r = 0; r < 16; ++r) EXPECT_EQ(bit(want, r), r < 10 && bit(all, r)) << "rule " << r;
  }
  op.set_param("rules", "0");
  EXPECT_THROW(op.make_kernels(Backend::kRef, 64, 1), std::invalid_argument);
  op.set_param("rules", "1000");
  EXPECT_THROW(op.make_kernels(Backend::kLib, 64, 1), std::invalid_argument);
}

TEST(RegexOperator, MismatchCatchesAWrongBitmap) {
  Operator& op = find_operator("rxp_match");
  ParamsGuard guard(op);
  auto lib = op.make_kernels(Backend::kLib, 256, 1);
  auto ref = op.make_kernels(Backend::kRef, 256, 1);
  const std::string payload = "GET /index.php HTTP/1.1 ' OR 1=1 UNION SELECT x";
  const Bytes in(payload.begin(), payload.end());
  Bytes want, got;
  ref[0]->process(in, want);
  lib[0]->process(in, got);
  ASSERT_EQ(op.mismatch(in, want, got), "");
  ASSERT_TRUE(bit(want, 0));  // http_get_script
  Bytes wrong = got;
  wrong[0] ^= 1;  // drop rule 0's match
  const std::string why = op.mismatch(in, want, wrong);
  EXPECT_NE(why.find("rule 0 (http_get_script) matches in ref but not in the backend"), std::string::npos) << why;
  wrong = got;
  wrong[2] ^= 0x80;  // claim rule 23
  EXPECT_NE(op.mismatch(in, want, wrong), "");
  wrong = got;
  wrong.pop_back();
  EXPECT_NE(op.mismatch(in, want, wrong), "");
}

TEST(RegexOperator, DevIsUnavailableWithTheReason) {
  Operator& op = find_operator("rxp_match");
  ParamsGuard guard(op);
  EXPECT_EQ(op.info().scenario, "security");
  EXPECT_EQ(op.info().version, regex_ref::kRuleSetVersion);
  try {
    op.make_kernels(Backend::kDev, 64, 1);
    ADD_FAILURE() << "dev backend made kernels";
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("no regexdev on this machine"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpukit::bench
