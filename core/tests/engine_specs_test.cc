// The BlueField engines' table (engine_specs.cc): every figure carries its
// source, guesses say so, engines exist where the sources say they do, and
// the lookups refuse what names no engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dpukit/core/dpu_speed.h"
#include "dpukit/core/engine.h"

namespace dpukit {
namespace {

constexpr EngineKind kKinds[] = {EngineKind::kRegex, EngineKind::kCompress, EngineKind::kDecompress,
                                 EngineKind::kBulkCrypto, EngineKind::kPublicKey};

// Every figure of a spec, named for the failure message.
std::vector<std::pair<std::string, const EngineFigure*>> figures(const EngineSpec& e) {
  std::string at = e.generation + "/" + engine_kind_name(e.kind) + ".";
  std::vector<std::pair<std::string, const EngineFigure*>> f = {
      {at + "latency_ns", &e.latency_ns}, {at + "queue_depth", &e.queue_depth}, {at + "parallel", &e.parallel}};
  if (e.kind == EngineKind::kPublicKey)
    for (const auto& [op, fig] : e.ops_per_s) f.push_back({at + op, &fig});
  else
    f.push_back({at + "bytes_per_s", &e.bytes_per_s});
  return f;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

template <typename E>
std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception of the expected type";
  return "";
}

TEST(EngineSpecs, EveryFigureHasASourceAndAGuessSaysSoFirst) {
  ASSERT_FALSE(engine_specs().empty());
  for (const auto& e : engine_specs()) {
    for (const auto& [name, f] : figures(e)) {
      EXPECT_GT(f->value, 0) << name;
      EXPECT_GE(f->source.size(), 20u) << name << ": a source names where the figure comes from";
      // A figure that is guessed must say so at the start, where guess()
      // and every reader look; "guess" further in is a mislabelled guess.
      if (lower(f->source).find("guess") != std::string::npos) {
        EXPECT_EQ(f->source.rfind("guess: ", 0), 0u) << name << ": " << f->source;
      }
      EXPECT_EQ(f->guess(), f->source.rfind("guess", 0) == 0) << name;
      // DPUBench's Fig. 12 ratio is what the model is checked against, never
      // an input (docs/core.md).
      EXPECT_EQ(lower(f->source).find("fig. 12"), std::string::npos) << name << ": " << f->source;
    }
  }
}

TEST(EngineSpecs, JsonCarriesEveryFigureWithItsSource) {
  for (const auto& e : engine_specs()) {
    const auto j = e.to_json();
    EXPECT_EQ(j.at("generation"), e.generation);
    EXPECT_EQ(j.at("kind"), engine_kind_name(e.kind));
    for (const char* k : {"latency_ns", "queue_depth", "parallel"}) {
      EXPECT_FALSE(j.at(k).at("source").get<std::string>().empty()) << k;
      EXPECT_TRUE(j.at(k).contains("guess")) << k;
    }
    if (e.kind == EngineKind::kPublicKey) {
      ASSERT_EQ(j.at("ops_per_s").size(), e.ops_per_s.size());
      for (const auto& [op, f] : e.ops_per_s) {
        EXPECT_DOUBLE_EQ(j.at("ops_per_s").at(op).at("value").get<double>(), f.value) << op;
        EXPECT_EQ(j.at("ops_per_s").at(op).at("guess").get<bool>(), f.guess()) << op;
      }
      EXPECT_FALSE(j.contains("bytes_per_s"));
    } else {
      EXPECT_DOUBLE_EQ(j.at("bytes_per_s").at("value").get<double>(), e.bytes_per_s.value);
      EXPECT_EQ(j.at("bytes_per_s").at("source").get<std::string>(), e.bytes_per_s.source);
    }
  }
}

TEST(EngineSpecs, OneSpecPerGenerationAndKind) {
  std::set<std::pair<std::string, int>> seen;
  for (const auto& e : engine_specs()) {
    EXPECT_TRUE(e.generation == "bluefield2" || e.generation == "bluefield3") << e.generation;
    EXPECT_TRUE(seen.insert({e.generation, static_cast<int>(e.kind)}).second)
        << e.generation << " has two " << engine_kind_name(e.kind) << " engines";
    EXPECT_EQ(&engine_spec(e.generation, e.kind), &e);
  }
}

TEST(EngineSpecs, BlueField2HasEveryEngine) {
  for (EngineKind k : kKinds) EXPECT_NO_THROW(engine_spec("bluefield2", k)) << engine_kind_name(k);
}

TEST(EngineSpecs, BlueField3HasNoRxpAndNoDeflateCompressor) {
  // DOCA Compress and the DPDK mlx5 compress PMD: BlueField-3 decompresses
  // only; no supported path reaches an RXP on BlueField-3 (docs/core.md).
  for (EngineKind k : {EngineKind::kRegex, EngineKind::kCompress}) {
    const std::string msg = what_of<EngineUnavailable>([k] { engine_spec("bluefield3", k); });
    EXPECT_NE(msg.find("bluefield3"), std::string::npos) << msg;
    EXPECT_NE(msg.find(engine_kind_name(k)), std::string::npos) << msg;
    EXPECT_NE(msg.find("DPDK mlx5"), std::string::npos) << msg << ": the message gives the sources' reason";
  }
  for (EngineKind k : {EngineKind::kDecompress, EngineKind::kBulkCrypto, EngineKind::kPublicKey})
    EXPECT_NO_THROW(engine_spec("bluefield3", k)) << engine_kind_name(k);
}

TEST(EngineSpecs, AnUnknownGenerationIsInvalidAndNamesTheKnownOnes) {
  for (const char* g : {"bluefield4", "BlueField2", "", "host"}) {
    const std::string msg = what_of<std::invalid_argument>([g] { engine_spec(g, EngineKind::kRegex); });
    EXPECT_NE(msg.find("bluefield2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bluefield3"), std::string::npos) << msg;
  }
}

TEST(EngineSpecs, GenerationOfADpuSpeed) {
  EXPECT_EQ(engine_generation(DpuSpeed::parse("bluefield2")), "bluefield2");
  EXPECT_EQ(engine_generation(DpuSpeed::parse("bluefield3")), "bluefield3");
  // A bare factor names no card, even BlueField-2's own.
  for (const char* s : {"host", "0.5", "0.45"}) {
    const DpuSpeed speed = DpuSpeed::parse(s);
    const std::string msg = what_of<std::invalid_argument>([&] { engine_generation(speed); });
    EXPECT_NE(msg.find("bluefield2, bluefield3"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("--dpu-speed ") + s), std::string::npos) << msg;
  }
}

TEST(EngineSpecs, KindNamesRoundTripAndAnUnknownOneIsRefused) {
  std::set<std::string> names;
  for (EngineKind k : kKinds) {
    EXPECT_EQ(parse_engine_kind(engine_kind_name(k)), k);
    names.insert(engine_kind_name(k));
  }
  EXPECT_EQ(names, (std::set<std::string>{"regex", "compress", "decompress", "crypto", "pka"}));
  const std::string msg = what_of<std::invalid_argument>([] { parse_engine_kind("rxp"); });
  EXPECT_NE(msg.find("'rxp'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("regex, compress, decompress, crypto, pka"), std::string::npos) << msg;
}

TEST(EngineSpecs, PkaOperationsAreNamedAndOrderedByTheirCost) {
  for (const char* g : {"bluefield2", "bluefield3"}) {
    const auto& pka = engine_spec(g, EngineKind::kPublicKey);
    EXPECT_EQ(pka.bytes_per_s.value, 0) << g;
    auto rate = [&](const std::string& op) {
      for (const auto& [name, f] : pka.ops_per_s)
        if (name == op) return f.value;
      ADD_FAILURE() << g << " PKA has no " << op;
      return 0.0;
    };
    // What bench's rsa, dsa and ecdsa operators sign with, and their verifies.
    for (const char* op : {"rsa2048_sign", "rsa3072_sign", "rsa4096_sign", "dsa2048_sign", "ecdsa_p256_sign",
                           "rsa2048_verify", "dsa2048_verify", "ecdsa_p256_verify", "ecdsa_p384_sign", "ecdh_p256",
                           "x25519", "dh2048"})
      EXPECT_GT(rate(op), 0) << g << " " << op;
    EXPECT_GT(rate("rsa2048_sign"), rate("rsa3072_sign"));
    EXPECT_GT(rate("rsa3072_sign"), rate("rsa4096_sign"));
    EXPECT_GT(rate("rsa2048_verify"), 10 * rate("rsa2048_sign"));  // e = 65537
    EXPECT_GT(rate("ecdsa_p256_sign"), rate("ecdsa_p256_verify"));
    EXPECT_GT(rate("ecdsa_p256_sign"), rate("ecdsa_p384_sign"));
    EXPECT_GT(rate("ecdsa_p256_sign"), rate("rsa2048_sign"));
  }
  for (const auto& e : engine_specs())
    if (e.kind != EngineKind::kPublicKey) {
      EXPECT_TRUE(e.ops_per_s.empty()) << e.generation;
    }
}

TEST(EngineSpecs, AlgorithmsFollowTheDriversLimits) {
  auto has = [](const EngineSpec& e, const std::string& a) {
    return std::find(e.algorithms.begin(), e.algorithms.end(), a) != e.algorithms.end();
  };
  // DPDK mlx5 crypto: 'AES-GCM is supported only on BlueField-3' (look-aside);
  // BlueField-2 runs AES-GCM only inline, on IPsec and TLS packets.
  const auto& c2 = engine_spec("bluefield2", EngineKind::kBulkCrypto);
  const auto& c3 = engine_spec("bluefield3", EngineKind::kBulkCrypto);
  EXPECT_TRUE(has(c2, "AES-XTS"));
  EXPECT_FALSE(has(c2, "AES-GCM"));
  EXPECT_TRUE(has(c2, "inline:TLS-AES-GCM"));
  EXPECT_TRUE(has(c3, "AES-GCM"));
  EXPECT_TRUE(has(c3, "inline:TLS-AES-GCM"));
  EXPECT_FALSE(has(c3, "AES-CBC"));
  // DPDK mlx5 compress: 'LZ4 algorithm is not supported by BlueField-2'.
  EXPECT_FALSE(has(engine_spec("bluefield2", EngineKind::kDecompress), "lz4"));
  EXPECT_TRUE(has(engine_spec("bluefield3", EngineKind::kDecompress), "lz4"));
  EXPECT_TRUE(has(engine_spec("bluefield2", EngineKind::kCompress), "deflate"));
}

}  // namespace
}  // namespace dpukit
