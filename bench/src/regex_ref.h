// The ref regex engine of operator rxp_match: a small subset of PCRE syntax
// parsed to a Thompson NFA and simulated Pike-style (a set of states per
// input position), so time is O(text length x NFA states) whatever the
// pattern: no backtracking blow-up. Plain C++, no intrinsics.
//
// Question answered: "does the pattern match anywhere in the text?" — rule i
// matches when some substring text[a, b) (a <= b) matches it, with the
// assertions judged against the whole text.
//
// The syntax subset (anything else is refused with a PatternError):
//   literals       printable ASCII other than . ^ $ | ( ) [ ] { } * + ? and backslash
//   escapes        \t \n \r \f \v, \xHH (exactly two hex digits), and any
//                  ASCII punctuation escaped stands for itself (\. \/ \{ ...)
//   classes        [abc] [a-z] [^...]; inside: literals, ranges between two
//                  single bytes, the escapes above, \d \w \s \D \W \S;
//                  '-' is literal first or last; [] and [^] are refused
//   shorthand      \d = [0-9], \w = [A-Za-z0-9_], \s = [\t\n\v\f\r ],
//                  \D \W \S their complements over all 256 byte values
//   dot            . = any byte except '\n' (Hyperscan without DOTALL)
//   groups         ( ) and (?: ) — both only group (nothing is captured)
//   alternation    a|b (empty branches allowed)
//   repeats        * + ? {n} {n,} {n,m} with n <= m <= 1000, greedy only
//   assertions     ^  start of text only (no multiline mode)
//                  $  end of text, or just before a '\n' that ends the text
//                     (PCRE's and Hyperscan's default)
//                  \b \B  word boundary / not one, with \w as word bytes
//                     and the outside of the text as a non-word byte
//   caseless       a per-pattern flag: ASCII letters match both cases
//                  (in literals, classes, ranges and \xHH alike); a negated
//                  class is negated after case folding, so /[^a]/i refuses
//                  'A' too
// Refused: lazy or possessive quantifiers, backreferences, lookaround, inline
// flags, named groups, \A \z \Z \G \Q \E \p, POSIX [:classes:], unescaped
// ] } and { outside a repeat, bytes outside 0x20..0x7e written directly.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dpukit::bench::regex_ref {

struct Pattern {
  std::string expr;
  bool caseless = false;
};

// A malformed pattern or one outside the subset; what() names the pattern,
// the offset and the reason.
struct PatternError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// A set of byte values (bit b of word b/64).
struct ByteSet {
  std::array<uint64_t, 4> words{};
  bool has(uint8_t b) const { return (words[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { words[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  void add(const ByteSet& o) {
    for (size_t i = 0; i < 4; ++i) words[i] |= o.words[i];
  }
  ByteSet complement() const {
    ByteSet c;
    for (size_t i = 0; i < 4; ++i) c.words[i] = ~words[i];
    return c;
  }
  bool empty() const { return (words[0] | words[1] | words[2] | words[3]) == 0; }
};

enum class Assertion : uint8_t { kTextStart, kTextEnd, kWordBoundary, kNotWordBoundary };

// One NFA state. kByte consumes one byte in `bytes` and goes to `next`;
// kSplit goes to both `next` and `alt`; kAssert goes to `next` when the
// assertion holds at the current position; kMatch means rule `rule` matched.
struct Inst {
  enum class Op : uint8_t { kByte, kSplit, kAssert, kMatch };
  Op op = Op::kMatch;
  Assertion assertion = Assertion::kTextStart;
  uint32_t rule = 0;
  uint32_t next = 0;
  uint32_t alt = 0;
  ByteSet bytes;
};

// Several patterns compiled into one NFA (one start state per pattern),
// immutable once built, so threads share it.
class RuleSet {
 public:
  // Throws PatternError naming the first pattern that is refused.
  explicit RuleSet(std::vector<Pattern> patterns);
  size_t size() const { return patterns_.size(); }
  size_t bitmap_bytes() const { return (patterns_.size() + 7) / 8; }
  const Pattern& pattern(size_t i) const { return patterns_.at(i); }
  size_t states() const { return prog_.size(); }

 private:
  friend class Matcher;
  std::vector<Pattern> patterns_;
  std::vector<Inst> prog_;
  std::vector<uint32_t> starts_;  // per pattern
  // Which patterns to start before a byte b: those whose start can consume b
  // (the others' start states would die on b at once), plus those that can
  // match without consuming a byte, started everywhere.
  std::array<std::vector<uint32_t>, 256> start_on_byte_;
  std::vector<uint32_t> start_always_;
};

// The per-thread state of a simulation over a RuleSet (the state sets are
// allocated once here, so match() does not allocate).
class Matcher {
 public:
  explicit Matcher(const RuleSet& rules);
  // Sets bit i % 8 of bitmap[i / 8] for every pattern i that matches
  // anywhere in `text`; other bits are left as they are. `bitmap` must be
  // rules.bitmap_bytes() long.
  void match(std::span<const uint8_t> text, std::span<uint8_t> bitmap);

 private:
  struct StateSet {  // a sparse set: O(1) insert, clear and membership
    std::vector<uint32_t> dense, sparse;
    size_t n = 0;
    bool contains(uint32_t s) const { return sparse[s] < n && dense[sparse[s]] == s; }
    void insert(uint32_t s) { sparse[s] = static_cast<uint32_t>(n); dense[n++] = s; }
  };
  void add(StateSet& set, uint32_t state, std::span<const uint8_t> text, size_t pos);

  const RuleSet& rules_;
  StateSet current_, next_;
  std::vector<uint32_t> stack_;
  std::vector<uint8_t> matched_;  // per pattern, for this text
  size_t matched_count_ = 0;
};

// Convenience for tests: does `p` match anywhere in `text`? (Compiles each call.)
bool matches(const Pattern& p, std::string_view text);

// The rule set of operator rxp_match, kept with the engine so that the tests
// reach it. Bump kRuleSetVersion (it is the operator's version) whenever a
// rule changes: results from two versions measure different work.
inline constexpr int kRuleSetVersion = 1;

struct Rule {
  enum class Place : uint8_t { kAnywhere, kStart, kEnd };  // where `sample` must sit to match
  std::string name;
  Pattern pattern;
  std::string sample;  // a text the pattern matches, planted into payloads
  Place place = Place::kAnywhere;
};
const std::vector<Rule>& rxp_rules();

}  // namespace dpukit::bench::regex_ref
