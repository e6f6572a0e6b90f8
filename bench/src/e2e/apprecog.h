// The application-recognition program (DPUBench §5.2, the second workload):
// the server matches each request's payload against the rxp_match rule set
// and, by the result, hashes the packet, compresses its payload, or echoes
// it back.
//
// The work is done by the benchmarked operators themselves (lib backends,
// made through the registry): rxp_match (Hyperscan), sha256 (OpenSSL EVP),
// compress (ISA-L igzip, raw deflate, level 1).
//
// Classification of rxp_match's bitmap (deterministic, first group wins):
//   - any rule of the "threat" group (attack signatures: injections,
//     traversal, shell commands, exploit payloads)  -> hash: the reply body
//     is the SHA-256 of the whole request datagram (a fingerprint to log);
//   - else any rule of the "data" group (credentials and personal or secret
//     data)                                         -> compress: the reply
//     body is the raw deflate stream of the request's payload (to archive);
//   - else                                          -> echo: the reply body
//     is the payload itself.
// The other rules of the set (protocol and content markers, some of which
// the client's text filler matches by itself) are matched like every rule
// but do not change the action.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "datagram.h"
#include "../operator.h"

namespace dpukit::bench::e2e {

class Classifier {
 public:
  Classifier();  // resolves the group names against rxp_rules(); throws std::logic_error if one is missing
  // The action for a bitmap of rxp_rules().size() bits (rxp_match's output).
  Action classify(std::span<const uint8_t> bitmap) const;
  // Rule indices of the group behind an action (kHash: threat, kCompress: data).
  const std::vector<size_t>& group(Action a) const;

 private:
  std::vector<size_t> threat_, data_, none_;
  std::vector<uint8_t> threat_mask_, data_mask_;
};

// The server's work for one request, on the lib backends of the operators.
// One per thread.
class AppRecognizer {
 public:
  AppRecognizer();  // throws Unavailable when a library backend is missing
  // rxp_match over the payload, then the classification.
  Action recognize(std::span<const uint8_t> body);
  // The complete reply datagram for `request` (whose header is `h`) and
  // `action`, written to `out` (resized); returns out.size().
  size_t reply(const Header& h, Action action, std::span<const uint8_t> request, Bytes& out);

 private:
  Classifier classifier_;
  std::unique_ptr<Kernel> match_, hash_, compress_;
  Bytes bitmap_, result_;
};

// The reply datagram for the request whose header is `h`: `action` and its
// already computed `result` (the digest, the deflate stream or the echoed
// payload), written to `out` (resized); returns out.size(). For results made
// elsewhere (the deflate engine's).
size_t write_reply(const Header& h, Action action, std::span<const uint8_t> result, Bytes& out);

// What the client sends: payloads of one size whose actions are known.
struct PayloadPool {
  std::vector<Bytes> bodies;
  std::vector<Action> expected;  // by the ref regex engine, independent of the server's Hyperscan
};

// `count` payloads of `body_bytes` bytes: text (like rxp_match's inputs)
// with one sample of a threat rule planted for hash, of a data rule for
// compress, none for echo, in the proportions of `mix` (rounded to whole
// payloads, in a seeded order). Each payload's action is then computed with
// the ref regex engine and the payload is remade with another seed until it
// is the one intended (the filler text can match rules by itself). Throws
// std::invalid_argument when the payload is too short for any sample of a
// group that `mix` asks for.
PayloadPool make_payload_pool(size_t body_bytes, size_t count, const Mix& mix, uint64_t seed);

// What the ref engine says: the action for `body` (used by the pool and the tests).
Action reference_action(std::span<const uint8_t> body);

// Checks a reply body against the request it answers: "" when right,
// otherwise what is wrong. hash: the SHA-256 of `request` (ref backend);
// compress: inflates to `request`'s payload (the compress operator's own
// check); echo: equal to the payload.
std::string check_reply_body(Action action, std::span<const uint8_t> request, std::span<const uint8_t> reply_body);

}  // namespace dpukit::bench::e2e
