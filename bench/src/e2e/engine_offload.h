// App recognition's work on a BlueField's engines (e2e-server --engine):
// the matching on the RXP (core's regex engine) and the compress action on
// the deflate engine, of the generation the dpu speed names
// (docs/bench.md, "End-to-end programs on the engines").
//
// The dpu thread stays the driver: it builds and posts one job per request
// and polls for completions through a DOCA-like task pool (core's
// EngineQueue, on the real clock), and pays only that. The job bodies are
// the lib backends' code (Hyperscan, ISA-L igzip), run on the engine's
// executor threads of the hw place, so every bitmap and deflate stream is
// exactly the library's, and their CPU time is hw, never dpu.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "dpukit/core/accounting.h"
#include "dpukit/core/dpu_speed.h"
#include "dpukit/core/engine.h"
#include "../engine_backend.h"

namespace dpukit::bench::e2e {

// Which of app recognition's steps run on an engine.
struct EngineChoice {
  bool regex = false;     // the rxp_match step on the RXP
  bool compress = false;  // the compress action on the deflate engine
  bool any() const { return regex || compress; }
  std::string str() const;  // "regex,compress", "" for none
};
// "regex", "compress", "regex,compress" (any order; "" for none); throws
// std::invalid_argument naming what it takes.
EngineChoice parse_engine_choice(const std::string& text);

// The engines a server uses, made before it serves (set-up, not per-packet
// work): one Engine per chosen kind, its executors on `hw_cpus` (one per CPU;
// one unpinned when empty), each lent one lib kernel per executor.
class EngineOffload {
 public:
  // Throws std::invalid_argument when the speed names no BlueField
  // generation, or when the generation has no such engine (the message names
  // the generation: "--engine regex: ... bluefield3 ...").
  EngineOffload(const EngineChoice& choice, const DpuSpeed& speed, const CpuSet& hw_cpus);
  ~EngineOffload();

  const EngineChoice& choice() const { return choice_; }
  const std::string& generation() const { return generation_; }
  // The shared state of a chosen engine (nullptr when not chosen).
  EngineShared* regex() const { return regex_.get(); }
  EngineShared* compress() const { return compress_.get(); }
  unsigned executors() const { return executors_; }
  nlohmann::json parameters() const;  // per engine: its spec (with sources), depth, executors

 private:
  EngineChoice choice_;
  std::string generation_;
  unsigned executors_ = 1;
  std::shared_ptr<EngineShared> regex_, compress_;
};

}  // namespace dpukit::bench::e2e
