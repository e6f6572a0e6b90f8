// The ref regex engine (see regex_ref.h for the syntax subset): a recursive
// descent parser to a small syntax tree, Thompson's construction to an NFA
// (built back to front, so every fragment knows its successor), and a Pike
// simulation that advances all live states one byte at a time.
#include "regex_ref.h"

#include <algorithm>
#include <utility>

namespace dpukit::bench::regex_ref {
namespace {

constexpr int kMaxRepeat = 1000;          // largest n or m in {n,m}
constexpr size_t kMaxStates = 100000;     // NFA states per pattern after repeats are expanded
constexpr int kMaxNesting = 200;          // group depth (the parser recurses per group)
constexpr int kUnbounded = -1;

bool is_word(uint8_t b) {
  return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || b == '_';
}

ByteSet digit_set() {
  ByteSet s;
  s.add_range('0', '9');
  return s;
}
ByteSet word_set() {
  ByteSet s;
  for (unsigned b = 0; b < 256; ++b)
    if (is_word(static_cast<uint8_t>(b))) s.add(static_cast<uint8_t>(b));
  return s;
}
ByteSet space_set() {
  ByteSet s;
  for (uint8_t b : {'\t', '\n', '\v', '\f', '\r', ' '}) s.add(b);
  return s;
}

// Adds the other case of every ASCII letter in the set.
ByteSet fold_case(ByteSet s) {
  for (uint8_t lo = 'a'; lo <= 'z'; ++lo) {
    const uint8_t up = static_cast<uint8_t>(lo - 'a' + 'A');
    if (s.has(lo) || s.has(up)) {
      s.add(lo);
      s.add(up);
    }
  }
  return s;
}

struct Node {
  enum class Kind : uint8_t { kEmpty, kBytes, kAssert, kConcat, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  ByteSet bytes;
  Assertion assertion = Assertion::kTextStart;
  int min = 0, max = 0;  // kRepeat; max == kUnbounded for * + {n,}
  std::vector<Node> kids;
};

Node bytes_node(const ByteSet& s) {
  Node n;
  n.kind = Node::Kind::kBytes;
  n.bytes = s;
  return n;
}

Node assert_node(Assertion a) {
  Node n;
  n.kind = Node::Kind::kAssert;
  n.assertion = a;
  return n;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool is_punct(char c) {
  const auto b = static_cast<unsigned char>(c);
  return b >= 0x20 && b <= 0x7e && !is_word(b);
}

class Parser {
 public:
  explicit Parser(const Pattern& p) : p_(p), s_(p.expr) {}

  Node parse() {
    Node n = alternation(0);
    if (pos_ < s_.size()) fail(pos_, "unmatched ')'");
    return n;
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& why) const {
    throw PatternError("regex '" + p_.expr + "'" + (p_.caseless ? " (caseless)" : "") + " at offset " +
                       std::to_string(at) + ": " + why);
  }

  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return s_[pos_]; }

  ByteSet leaf(ByteSet s) const { return p_.caseless ? fold_case(s) : s; }

  Node alternation(int depth) {
    Node first = concatenation(depth);
    if (at_end() || peek() != '|') return first;
    Node alt;
    alt.kind = Node::Kind::kAlt;
    alt.kids.push_back(std::move(first));
    while (!at_end() && peek() == '|') {
      ++pos_;
      alt.kids.push_back(concatenation(depth));
    }
    return alt;
  }

  Node concatenation(int depth) {
    Node cat;
    cat.kind = Node::Kind::kConcat;
    while (!at_end() && peek() != '|' && peek() != ')') cat.kids.push_back(repeat(depth));
    if (cat.kids.empty()) return Node{};  // an empty branch matches the empty string
    if (cat.kids.size() == 1) return std::move(cat.kids[0]);
    return cat;
  }

  static bool is_quantifier(char c) { return c == '*' || c == '+' || c == '?' || c == '{'; }

  Node repeat(int depth) {
    Node atom = this->atom(depth);
    if (at_end() || !is_quantifier(peek())) return atom;
    const size_t q_at = pos_;
    if (atom.kind == Node::Kind::kAssert) fail(q_at, "nothing to repeat (an assertion cannot be repeated)");
    int min = 0, max = kUnbounded;
    const char q = s_[pos_++];
    if (q == '+') {
      min = 1;
    } else if (q == '?') {
      max = 1;
    } else if (q == '{') {
      min = number(q_at);
      max = min;
      if (!at_end() && peek() == ',') {
        ++pos_;
        max = (!at_end() && peek() >= '0' && peek() <= '9') ? number(q_at) : kUnbounded;
      }
      if (at_end() || peek() != '}') fail(q_at, "'{' starts a repeat {n}, {n,} or {n,m} that is not closed by '}'");
      ++pos_;
      if (max != kUnbounded && max < min) fail(q_at, "repeat {n,m} with m < n");
    }
    if (!at_end()) {
      if (peek() == '?') fail(pos_, "lazy quantifiers are not supported");
      if (peek() == '+') fail(pos_, "possessive quantifiers are not supported");
      if (is_quantifier(peek())) fail(pos_, "a quantifier cannot follow another quantifier");
    }
    Node r;
    r.kind = Node::Kind::kRepeat;
    r.min = min;
    r.max = max;
    r.kids.push_back(std::move(atom));
    return r;
  }

  // Decimal digits at pos_, at most kMaxRepeat; `q_at` is the repeat's '{'.
  int number(size_t q_at) {
    if (at_end() || peek() < '0' || peek() > '9')
      fail(q_at, "'{' must be escaped as \\{ when it does not start a repeat {n}, {n,} or {n,m}");
    long v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeat) fail(q_at, "repeat bound above " + std::to_string(kMaxRepeat));
      ++pos_;
    }
    return static_cast<int>(v);
  }

  Node atom(int depth) {
    const size_t at = pos_;
    const char c = s_[pos_++];
    switch (c) {
      case '(': {
        if (depth >= kMaxNesting) fail(at, "groups nested deeper than " + std::to_string(kMaxNesting));
        if (!at_end() && peek() == '?') {
          if (pos_ + 1 < s_.size() && s_[pos_ + 1] == ':') {
            pos_ += 2;
          } else {
            fail(at, "'(?' other than '(?:' (lookaround, inline flags, named groups) is not supported");
          }
        }
        Node inner = alternation(depth + 1);
        if (at_end() || peek() != ')') fail(at, "missing ')'");
        ++pos_;
        return inner;
      }
      case '[': return bytes_node(char_class(at));
      case '.': {
        ByteSet s;
        s.add('\n');
        return bytes_node(s.complement());
      }
      case '^': return assert_node(Assertion::kTextStart);
      case '$': return assert_node(Assertion::kTextEnd);
      case '\\': return escape(at);
      case '*':
      case '+':
      case '?': fail(at, std::string("nothing to repeat before '") + c + "'");
      case '{': fail(at, "nothing to repeat, or an unescaped '{' (write \\{)");
      case ']': fail(at, "unescaped ']' outside a class (write \\])");
      case '}': fail(at, "unescaped '}' (write \\})");
      default: break;
    }
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x20 || b > 0x7e) fail(at, "byte 0x" + hex2(b) + " written directly (write \\xHH)");
    ByteSet s;
    s.add(b);
    return bytes_node(leaf(s));
  }

  static std::string hex2(unsigned b) {
    static const char* d = "0123456789abcdef";
    return {d[(b >> 4) & 15], d[b & 15]};
  }

  // After a backslash outside a class: a byte set or an assertion.
  Node escape(size_t at) {
    if (at_end()) fail(at, "trailing backslash");
    const char c = s_[pos_];
    if (c == 'b' || c == 'B') {
      ++pos_;
      return assert_node(c == 'b' ? Assertion::kWordBoundary : Assertion::kNotWordBoundary);
    }
    return bytes_node(leaf(escaped_set(at, /*in_class=*/false)));
  }

  // The set an escape stands for (pos_ is just after the backslash).
  ByteSet escaped_set(size_t at, bool in_class) {
    const char c = s_[pos_++];
    ByteSet s;
    switch (c) {
      case 'd': return digit_set();
      case 'D': return digit_set().complement();
      case 'w': return word_set();
      case 'W': return word_set().complement();
      case 's': return space_set();
      case 'S': return space_set().complement();
      case 't': s.add('\t'); return s;
      case 'n': s.add('\n'); return s;
      case 'r': s.add('\r'); return s;
      case 'f': s.add('\f'); return s;
      case 'v': s.add('\v'); return s;
      case 'x': {
        const int hi = pos_ < s_.size() ? hex_value(s_[pos_]) : -1;
        const int lo = pos_ + 1 < s_.size() ? hex_value(s_[pos_ + 1]) : -1;
        if (hi < 0 || lo < 0) fail(at, "\\x must be followed by exactly two hex digits");
        pos_ += 2;
        s.add(static_cast<uint8_t>(hi * 16 + lo));
        return s;
      }
      default: break;
    }
    if (c >= '0' && c <= '9') fail(at, "backreferences and octal escapes are not supported");
    if (c == 'b' && in_class) fail(at, "\\b inside a class is not supported");
    if (is_punct(c)) {
      s.add(static_cast<uint8_t>(c));
      return s;
    }
    const auto b = static_cast<unsigned char>(c);
    fail(at, b > 0x20 && b < 0x7f ? std::string("unsupported escape \\") + c
                                  : "a backslash before byte 0x" + hex2(b) + " is not supported");
  }

  // One class element: a single byte (returned in `byte`) or a set.
  bool class_element(ByteSet& set, uint8_t& byte) {
    const size_t at = pos_;
    const char c = s_[pos_++];
    if (c == '\\') {
      if (at_end()) fail(at, "trailing backslash");
      const char e = peek();
      set = escaped_set(at, /*in_class=*/true);
      const bool single = !(e == 'd' || e == 'D' || e == 'w' || e == 'W' || e == 's' || e == 'S');
      if (single)
        for (unsigned b = 0; b < 256; ++b)
          if (set.has(static_cast<uint8_t>(b))) byte = static_cast<uint8_t>(b);
      return single;
    }
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x20 || b > 0x7e) fail(at, "byte 0x" + hex2(b) + " written directly (write \\xHH)");
    if (c == '[' && !at_end() && (peek() == ':' || peek() == '=' || peek() == '.'))
      fail(at, "POSIX classes [:name:] [=x=] [.x.] are not supported");
    set = ByteSet{};
    set.add(b);
    byte = b;
    return true;
  }

  ByteSet char_class(size_t open_at) {
    bool negate = false;
    if (!at_end() && peek() == '^') {
      negate = true;
      ++pos_;
    }
    if (!at_end() && peek() == ']') fail(open_at, "[] and []...] are ambiguous between dialects (write \\])");
    ByteSet members;
    while (true) {
      if (at_end()) fail(open_at, "missing ']'");
      if (peek() == ']') {
        ++pos_;
        break;
      }
      const size_t at = pos_;
      ByteSet set;
      uint8_t lo = 0;
      const bool single = class_element(set, lo);
      // a '-' between two elements makes a range; first or last it is literal
      if (pos_ + 1 < s_.size() && peek() == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        if (!single) fail(at, "a range cannot start at a class escape like \\d");
        ByteSet hi_set;
        uint8_t hi = 0;
        if (!class_element(hi_set, hi)) fail(at, "a range cannot end at a class escape like \\d");
        if (hi < lo) fail(at, "range out of order");
        members.add_range(lo, hi);
      } else {
        members.add(set);
      }
    }
    ByteSet s = leaf(members);  // fold first: /[^a]/i refuses 'A' too (PCRE, Hyperscan)
    return negate ? s.complement() : s;
  }

  const Pattern& p_;
  const std::string& s_;
  size_t pos_ = 0;
};

// Thompson's construction, back to front: emit(n, next) adds the states of
// `n` and returns its entry, which leads to `next` once `n` has matched.
class Compiler {
 public:
  Compiler(std::vector<Inst>& prog, uint32_t rule, const Pattern& p)
      : prog_(prog), rule_(rule), p_(p), limit_(prog.size() + kMaxStates) {}

  uint32_t compile(const Node& root) {
    Inst m;
    m.op = Inst::Op::kMatch;
    return emit(root, push(m));
  }

 private:
  uint32_t push(Inst in) {
    if (prog_.size() >= limit_)
      throw PatternError("regex '" + p_.expr + "': more than " + std::to_string(kMaxStates) +
                         " NFA states once repeats are expanded");
    in.rule = rule_;
    prog_.push_back(in);
    return static_cast<uint32_t>(prog_.size() - 1);
  }

  uint32_t split(uint32_t a, uint32_t b) {
    Inst in;
    in.op = Inst::Op::kSplit;
    in.next = a;
    in.alt = b;
    return push(in);
  }

  uint32_t emit(const Node& n, uint32_t next) {
    switch (n.kind) {
      case Node::Kind::kEmpty: return next;
      case Node::Kind::kBytes: {
        Inst in;
        in.op = Inst::Op::kByte;
        in.bytes = n.bytes;
        in.next = next;
        return push(in);
      }
      case Node::Kind::kAssert: {
        Inst in;
        in.op = Inst::Op::kAssert;
        in.assertion = n.assertion;
        in.next = next;
        return push(in);
      }
      case Node::Kind::kConcat:
        for (auto it = n.kids.rbegin(); it != n.kids.rend(); ++it) next = emit(*it, next);
        return next;
      case Node::Kind::kAlt: {
        uint32_t entry = emit(n.kids.back(), next);
        for (size_t i = n.kids.size() - 1; i-- > 0;) entry = split(emit(n.kids[i], next), entry);
        return entry;
      }
      case Node::Kind::kRepeat: {
        const Node& body = n.kids[0];
        uint32_t tail = next;
        if (n.max == kUnbounded) {
          const uint32_t loop = split(0, next);  // body or leave; body is patched in below
          const uint32_t entry = emit(body, loop);
          prog_[loop].next = entry;
          tail = loop;
        } else {
          // the optional copies nest, (X(X)?)?, so that each is tried only after the one before
          for (int i = 0; i < n.max - n.min; ++i) tail = split(emit(body, tail), next);
        }
        for (int i = 0; i < n.min; ++i) tail = emit(body, tail);
        return tail;
      }
    }
    return next;
  }

  std::vector<Inst>& prog_;
  uint32_t rule_;
  const Pattern& p_;
  size_t limit_;
};

}  // namespace

RuleSet::RuleSet(std::vector<Pattern> patterns) : patterns_(std::move(patterns)) {
  for (size_t i = 0; i < patterns_.size(); ++i) {
    const Node root = Parser(patterns_[i]).parse();
    starts_.push_back(Compiler(prog_, static_cast<uint32_t>(i), patterns_[i]).compile(root));
  }
  // The bytes each pattern's first step can consume, over every path of
  // non-consuming states from its start (assertions taken as passable, so
  // the set can only be too large, which costs time, never a match).
  std::vector<uint8_t> seen(prog_.size());
  std::vector<uint32_t> stack;
  for (size_t r = 0; r < starts_.size(); ++r) {
    ByteSet first;
    bool empty_match = false;
    stack.assign(1, starts_[r]);
    while (!stack.empty()) {
      const uint32_t s = stack.back();
      stack.pop_back();
      if (seen[s]) continue;
      seen[s] = 1;
      const Inst& in = prog_[s];
      switch (in.op) {
        case Inst::Op::kByte: first.add(in.bytes); break;
        case Inst::Op::kSplit: stack.push_back(in.alt); stack.push_back(in.next); break;
        case Inst::Op::kAssert: stack.push_back(in.next); break;
        case Inst::Op::kMatch: empty_match = true; break;
      }
    }
    const auto rule = static_cast<uint32_t>(r);
    if (empty_match) {
      start_always_.push_back(rule);
      continue;
    }
    for (unsigned b = 0; b < 256; ++b)
      if (first.has(static_cast<uint8_t>(b))) start_on_byte_[b].push_back(rule);
  }
}

Matcher::Matcher(const RuleSet& rules) : rules_(rules), matched_(rules.size()) {
  const size_t n = rules.prog_.size();
  for (StateSet* s : {&current_, &next_}) {
    s->dense.resize(n);
    s->sparse.resize(n);
  }
  stack_.reserve(2 * n + 1);
}

// Adds `state` and every state reachable from it without consuming a byte,
// with assertions judged at `pos`; a match state marks its rule.
void Matcher::add(StateSet& set, uint32_t state, std::span<const uint8_t> text, size_t pos) {
  const std::vector<Inst>& prog = rules_.prog_;
  stack_.clear();
  stack_.push_back(state);
  while (!stack_.empty()) {
    const uint32_t s = stack_.back();
    stack_.pop_back();
    if (set.contains(s)) continue;
    set.insert(s);
    const Inst& in = prog[s];
    switch (in.op) {
      case Inst::Op::kByte: break;  // waits for the next byte
      case Inst::Op::kSplit:
        stack_.push_back(in.alt);
        stack_.push_back(in.next);
        break;
      case Inst::Op::kAssert: {
        bool holds = false;
        const size_t n = text.size();
        switch (in.assertion) {
          case Assertion::kTextStart: holds = pos == 0; break;
          case Assertion::kTextEnd: holds = pos == n || (pos + 1 == n && text[pos] == '\n'); break;
          case Assertion::kWordBoundary:
          case Assertion::kNotWordBoundary: {
            const bool before = pos > 0 && is_word(text[pos - 1]);
            const bool after = pos < n && is_word(text[pos]);
            holds = (before != after) == (in.assertion == Assertion::kWordBoundary);
            break;
          }
        }
        if (holds) stack_.push_back(in.next);
        break;
      }
      case Inst::Op::kMatch:
        if (!matched_[in.rule]) {
          matched_[in.rule] = 1;
          ++matched_count_;
        }
        break;
    }
  }
}

void Matcher::match(std::span<const uint8_t> text, std::span<uint8_t> bitmap) {
  const std::vector<Inst>& prog = rules_.prog_;
  const size_t rules = rules_.size();
  std::fill(matched_.begin(), matched_.end(), 0);
  matched_count_ = 0;
  current_.n = 0;
  for (size_t pos = 0;; ++pos) {
    // "anywhere": every pattern not yet matched may start at every position
    // (and need only start where the next byte can begin it)
    for (uint32_t r : rules_.start_always_)
      if (!matched_[r]) add(current_, rules_.starts_[r], text, pos);
    if (pos < text.size())
      for (uint32_t r : rules_.start_on_byte_[text[pos]])
        if (!matched_[r]) add(current_, rules_.starts_[r], text, pos);
    if (matched_count_ == rules || pos == text.size()) break;
    const uint8_t b = text[pos];
    next_.n = 0;
    for (size_t k = 0; k < current_.n; ++k) {
      const Inst& in = prog[current_.dense[k]];
      if (in.op == Inst::Op::kByte && !matched_[in.rule] && in.bytes.has(b)) add(next_, in.next, text, pos + 1);
    }
    std::swap(current_, next_);
  }
  for (size_t r = 0; r < rules; ++r)
    if (matched_[r]) bitmap[r / 8] |= static_cast<uint8_t>(1u << (r % 8));
}

bool matches(const Pattern& p, std::string_view text) {
  RuleSet rules({p});
  Matcher m(rules);
  uint8_t bitmap[1] = {0};
  m.match(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()), bitmap);
  return bitmap[0] & 1;
}

}  // namespace dpukit::bench::regex_ref

namespace dpukit::bench::regex_ref {

// The rxp_match rule set, version kRuleSetVersion: signatures in the style of
// IDS rules (Snort/Suricata pcre options) and URL filters, written for this
// benchmark to cover the subset: literals, classes, alternation, bounded and
// unbounded repeats, ^ $ \b, caseless rules, binary bytes. None matches the
// empty string (Hyperscan refuses such patterns). Each sample is a text the
// rule matches (a test checks it), planted into payloads by make_inputs.
const std::vector<Rule>& rxp_rules() {
  using P = Rule::Place;
  static const std::vector<Rule> rules = [] {
    auto bin = [](std::initializer_list<unsigned> bytes) {
      std::string s;
      for (unsigned b : bytes) s += static_cast<char>(b);
      return s;
    };
    const bool ci = true, cs = false;
    return std::vector<Rule>{
        {"http_get_script", {R"(^GET /[A-Za-z0-9_/.\-]*\.(php|aspx?|jsp|cgi)\b)", cs}, "GET /cgi-bin/test.cgi?x=1", P::kStart},
        {"http_post_upload", {R"(^POST /[^ ]*upload[^ ]* HTTP/1\.[01])", cs}, "POST /api/upload.php HTTP/1.1", P::kStart},
        {"dir_traversal", {R"((\.\./){2,}(etc|windows|boot)/)", ci}, "../../../etc/passwd", P::kAnywhere},
        {"etc_passwd", {R"(/etc/(passwd|shadow|group)\b)", cs}, "/etc/shadow", P::kAnywhere},
        {"sqli_union", {R"(\bunion\s+(all\s+)?select\b)", ci}, "UNION ALL SELECT", P::kAnywhere},
        {"sqli_select_from", {R"(\bselect\s+[a-z0-9_*,. ]{1,64}\s+from\s+\w+)", ci}, "SELECT id, password FROM users", P::kAnywhere},
        {"sqli_tautology", {R"('\s*or\s+'?\d+'?\s*=\s*'?\d+)", ci}, "' OR '1'='1", P::kAnywhere},
        {"sqli_drop", {R"(;\s*(drop|truncate)\s+table\s+\w+)", ci}, "; DROP TABLE users", P::kAnywhere},
        {"sqli_sleep", {R"(\b(sleep|benchmark)\s*\(\s*\d+)", ci}, "SLEEP( 5)", P::kAnywhere},
        {"xss_script_tag", {R"(<script[^>]*>)", ci}, "<script src=\"x.js\">", P::kAnywhere},
        {"xss_js_uri", {R"(javascript\s*:)", ci}, "JavaScript:alert(1)", P::kAnywhere},
        {"xss_event_handler", {R"(\bon(load|error|mouseover|focus)\s*=)", ci}, "onerror =", P::kAnywhere},
        {"xss_encoded", {R"(%3c\s*script)", ci}, "%3Cscript", P::kAnywhere},
        {"cmd_exe", {R"(\bcmd\.exe\b)", ci}, "cmd.exe /c dir", P::kAnywhere},
        {"bin_sh", {R"(/bin/(ba|z|da)?sh\b)", cs}, "/bin/bash -i", P::kAnywhere},
        {"wget_curl_url", {R"(\b(wget|curl)\s+(-[A-Za-z]+\s+)*https?://[A-Za-z0-9.\-]+)", cs}, "curl -sSL http://x.example", P::kAnywhere},
        {"nc_exec", {R"(\bnc(at)?\s+(-[a-z]+\s+)*-e\s+/bin/)", cs}, "nc -lvp -e /bin/sh", P::kAnywhere},
        {"chmod_root", {R"(\bchmod\s+[0-7]{3,4}\s+/)", cs}, "chmod 4755 /opt/app", P::kAnywhere},
        {"rm_rf", {R"(\brm\s+-[rf]{1,2}\s+/)", cs}, "rm -rf /", P::kAnywhere},
        {"shellshock", {R"(\(\)\s*\{\s*:\s*;\s*\}\s*;)", cs}, "() { :; };", P::kAnywhere},
        {"log4shell", {R"(\$\{jndi:(ldap|rmi|dns|iiop)s?://)", ci}, "${jndi:ldap://x.example/a}", P::kAnywhere},
        {"php_eval", {R"(\beval\s*\(\s*(base64_decode|gzinflate|str_rot13)\s*\()", ci}, "eval(base64_decode(", P::kAnywhere},
        {"scanner_agent", {R"(User-Agent:\s*[^\r\n]*(sqlmap|nikto|nmap|masscan|zgrab))", ci}, "User-Agent: Mozilla/5.0 sqlmap/1.5", P::kAnywhere},
        {"onion_host", {R"(\bHost:\s*[a-z2-7]{16}([a-z2-7]{40})?\.onion\b)", ci}, "Host: expyuzz4wqqyqhjn.onion", P::kAnywhere},
        {"basic_auth", {R"(Authorization:\s*Basic\s+[A-Za-z0-9+/]{8,}={0,2})", ci}, "Authorization: Basic YWRtaW46YWRtaW4=", P::kAnywhere},
        {"password_param", {R"([?&](pass|passwd|password|pwd)=[^&\s]{1,64})", ci}, "?password=hunter2", P::kAnywhere},
        {"credentials_url", {R"(\b(admin|root|guest):[^:\s@]{3,}@)", ci}, "root:toor12@host", P::kAnywhere},
        {"ssn", {R"(\b\d{3}-\d{2}-\d{4}\b)", cs}, "078-05-1120", P::kAnywhere},
        {"credit_card", {R"(\b(4\d{3}|5[1-5]\d{2})([ \-]?\d{4}){3}\b)", cs}, "4111 1111 1111 1111", P::kAnywhere},
        {"email", {R"(\b[a-z0-9._%+\-]+@[a-z0-9\-]+(\.[a-z0-9\-]+)*\.[a-z]{2,6}\b)", ci}, "alice.smith@mail.example.com", P::kAnywhere},
        {"ipv4", {R"(\b(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}\b)", cs}, "192.168.10.254", P::kAnywhere},
        {"mac_address", {R"(\b[0-9a-f]{2}(:[0-9a-f]{2}){5}\b)", ci}, "00:1A:2b:3C:4d:5E", P::kAnywhere},
        {"exe_download", {R"(\bhttps?://[^\s/]+/[^\s]*\.(exe|dll|scr|bat|ps1)\b)", ci}, "http://files.example/x/setup.exe", P::kAnywhere},
        {"gambling_site", {R"(\b(www\.)?[a-z0-9\-]*(casino|poker|betting)[a-z0-9\-]*\.(com|net|io)\b)", ci}, "www.best-poker-site.net", P::kAnywhere},
        {"url_shortener", {R"(\b(bit\.ly|tinyurl\.com|goo\.gl|t\.co)/[A-Za-z0-9]{4,10}\b)", cs}, "bit.ly/3xYz9Ab", P::kAnywhere},
        {"pct_traversal", {R"((%2e|\.){2}(%2f|%5c))", ci}, "%2E%2E%2F", P::kAnywhere},
        {"heavy_pct_encoding", {R"((%[0-9a-f]{2}){12,})", ci}, "%41%42%43%44%45%46%47%48%49%4a%4b%4c", P::kAnywhere},
        {"remote_include", {R"(\?[^\s#]*=(https?|ftp)://)", ci}, "?page=http://evil.example/x", P::kAnywhere},
        {"wordpress_probe", {R"(/wp-(admin|login\.php|content/plugins/[^/\s]+/))", cs}, "/wp-login.php", P::kAnywhere},
        {"vcs_leak", {R"(/\.(git|svn|hg)/(config|HEAD|entries|index)\b)", cs}, "/.git/config", P::kAnywhere},
        {"phpmyadmin", {R"(/(phpmyadmin|pma|myadmin)/(index|setup)\.php)", ci}, "/phpMyAdmin/index.php", P::kAnywhere},
        {"http_error_status", {R"(HTTP/1\.[01] [45]\d\d\b)", cs}, "HTTP/1.1 503", P::kAnywhere},
        {"ok_json_line", {R"(\b200\s+OK\b[^\n]*application/json)", cs}, "200 OK Content-Type: application/json", P::kAnywhere},
        {"exec_content_type", {R"(Content-Type:\s*application/(x-)?(sh|msdownload|octet-stream|java-archive)\b)", ci}, "Content-Type: application/octet-stream", P::kAnywhere},
        {"exe_at_end", {R"(\.(exe|msi|scr)$)", ci}, "dropper.exe", P::kEnd},
        {"token_at_end", {R"(token=[A-Za-z0-9_\-]{20,}$)", cs}, "token=abcdefghij0123456789_-XY", P::kEnd},
        {"tls_client_hello", {R"(^\x16\x03[\x00-\x04]..\x01)", cs}, bin({0x16, 0x03, 0x01, 0x02, 0x00, 0x01}), P::kStart},
        {"pe_header", {R"(MZ\x90\x00\x03\x00\x00\x00)", cs}, bin({'M', 'Z', 0x90, 0x00, 0x03, 0x00, 0x00, 0x00}), P::kAnywhere},
        {"nop_sled", {R"(\x90{16,})", cs}, std::string(16, '\x90'), P::kAnywhere},
        {"escaped_shellcode", {R"((\\x[0-9a-f]{2}){8,})", ci}, R"(\x31\xc0\x50\x68\x2f\x2f\x73\x68)", P::kAnywhere},
        {"overflow_run", {R"(A{40,})", cs}, std::string(40, 'A'), P::kAnywhere},
        {"binary_run", {R"([^\x20-\x7e\t\r\n]{8,})", cs}, bin({1, 2, 3, 4, 5, 6, 7, 8}), P::kAnywhere},
        {"ssh_banner", {R"(^SSH-[12]\.\d+-[A-Za-z0-9_.\-]+)", cs}, "SSH-2.0-OpenSSH_8.9p1", P::kStart},
        {"forwarded_for", {R"(\bX-Forwarded-For:\s*(\d{1,3}\.){3}\d{1,3})", ci}, "X-Forwarded-For: 10.0.0.1", P::kAnywhere},
        {"aws_access_key", {R"(\b(AKIA|ASIA)[0-9A-Z]{16}\b)", cs}, "AKIAIOSFODNN7EXAMPLE", P::kAnywhere},
        {"private_key", {R"(-----BEGIN (RSA |EC |DSA |OPENSSH )?PRIVATE KEY-----)", cs}, "-----BEGIN RSA PRIVATE KEY-----", P::kAnywhere},
        {"jwt", {R"(\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,})", cs}, "eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2Q", P::kAnywhere},
        {"sha256_hex", {R"(\b[0-9a-f]{64}\b)", ci}, "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08", P::kAnywhere},
        {"session_cookie", {R"(\bCookie:[^\r\n]*\b(PHPSESSID|JSESSIONID|sessionid)=[0-9A-Za-z]{16,})", ci}, "Cookie: lang=en; PHPSESSID=8f3a9c2b7d1e4f60a", P::kAnywhere},
        {"admin_password_line", {R"(admin[^\n]*password)", ci}, "admin password", P::kAnywhere},
        {"login_error_line", {R"(\blogin\b.*\berror\b)", ci}, "login error", P::kAnywhere},
        {"flow_near_start", {R"(^.{0,24}\bflow\b)", cs}, "flow", P::kStart},
        {"session_token", {R"(\bsession\s+token\b)", cs}, "session token", P::kAnywhere},
        {"delete_where", {R"(\bdelete\s+from\s+\w+\s+where\b)", ci}, "DELETE FROM t WHERE", P::kAnywhere},
        {"query_quote", {R"(\?(id|user|q)=[^&\s]*('|%27))", ci}, "?id=1'", P::kAnywhere},
        {"overlong_utf8", {R"(%c0%af|%e0%80%af|%c1%9c)", ci}, "%C0%AF", P::kAnywhere},
        {"dns_tunnel", {R"(\b[a-z0-9]{40,63}\.[a-z0-9\-]+\.(com|net|org)\b)", ci}, "mzxw6ytboi4dcmrtgq2tmnzygeztsnbrgm3dqmbx.tunnel.net", P::kAnywhere},
        {"commit_at_end", {R"(\bcommit$)", cs}, "commit", P::kEnd},
    };
  }();
  return rules;
}

}  // namespace dpukit::bench::regex_ref
