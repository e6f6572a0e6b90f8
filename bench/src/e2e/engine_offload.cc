#include "engine_offload.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "datagram.h"

namespace dpukit::bench::e2e {
namespace {

// The engine of `kind` on `generation`, its bodies `op`'s lib kernels.
std::shared_ptr<EngineShared> make_shared_engine(const char* op, EngineKind kind, const std::string& generation,
                                                 const CpuSet& hw_cpus, unsigned executors) {
  const EngineSpec* spec = nullptr;
  try {
    spec = &engine_spec(generation, kind);
  } catch (const EngineUnavailable& e) {
    throw std::invalid_argument(std::string("--engine ") + engine_kind_name(kind) + ": " + e.what());
  }
  auto sh = std::make_shared<EngineShared>();
  sh->work = Operator::EngineWork{kind, "", ""};
  sh->owned = find_operator(op).make_kernels(Backend::kLib, kMaxDatagram, executors);
  for (auto& k : sh->owned) sh->idle.push_back(k.get());
  sh->engine = std::make_unique<Engine>(*spec, executors, hw_cpus);
  return sh;
}

}  // namespace

std::string EngineChoice::str() const {
  if (regex && compress) return "regex,compress";
  return regex ? "regex" : compress ? "compress" : "";
}

EngineChoice parse_engine_choice(const std::string& text) {
  EngineChoice c;
  if (text.empty()) return c;
  std::stringstream in(text);
  for (std::string w; std::getline(in, w, ',');) {
    if (w == "regex")
      c.regex = true;
    else if (w == "compress")
      c.compress = true;
    else
      throw std::invalid_argument("--engine takes regex (the matching on the RXP) and compress (the compress "
                                  "action on the deflate engine), comma-separated, not '" + w + "'");
  }
  if (!c.any()) throw std::invalid_argument("--engine: no engine named in '" + text + "'");
  return c;
}

EngineOffload::EngineOffload(const EngineChoice& choice, const DpuSpeed& speed, const CpuSet& hw_cpus)
    : choice_(choice) {
  try {
    generation_ = engine_generation(speed);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--engine needs a BlueField generation (--dpu-speed bluefield2 or "
                                            "bluefield3): ") + e.what());
  }
  executors_ = std::max<unsigned>(1, static_cast<unsigned>(hw_cpus.cpus.size()));
  if (choice_.regex) regex_ = make_shared_engine("rxp_match", EngineKind::kRegex, generation_, hw_cpus, executors_);
  if (choice_.compress)
    compress_ = make_shared_engine("compress", EngineKind::kCompress, generation_, hw_cpus, executors_);
}

EngineOffload::~EngineOffload() = default;

nlohmann::json EngineOffload::parameters() const {
  nlohmann::json p = {{"generation", generation_}, {"executors", executors_}, {"chosen", choice_.str()}};
  for (const auto& [name, sh] : {std::pair{"regex", regex_.get()}, std::pair{"compress", compress_.get()}}) {
    if (!sh) continue;
    const EngineSpec& spec = sh->engine->spec();
    p[name] = {{"name", spec.name},
               {"depth", static_cast<unsigned>(spec.queue_depth.value)},
               {"body", std::string(name) == "regex" ? "rxp_match/lib (Hyperscan)" : "compress/lib (ISA-L igzip)"},
               {"spec", spec.to_json()}};
  }
  return p;
}

}  // namespace dpukit::bench::e2e
