// The dpu speed model on kv's real loop (issue 31 §1): the dpukit-agent
// process, pinned to one CPU, serving a queue pair of kWrite requests into
// real files, at F = 0.5 against F = 1, paired and interleaved (core's
// paired_speed_check_with_retry): throughput 0.47-0.53x and the agent's CPU
// per write 1.9-2.1x, at 4 KiB and at 512 B writes.
//
// The workload is queued while the agent is stopped (SIGSTOP), so that the
// measured run is the agent working flat out from its first request to the
// last file's sync_close, never waiting for the host, and its CPU time is
// all the agent's work: receiving (the ring and the payload copy), the
// hand-off to the write thread, writing and replying. A part of that the
// model does not dilate, or a model that bills its own clock reads, shows
// as a ratio below or above 1/F.
//
// The files are on tmpfs where there is one, so that no disk's speed
// enters, and the engine is `--io-engine pwrite`: its writes are system
// calls on the write thread, which the model dilates. io_uring on tmpfs
// hands every write to io_uring's own worker threads (io-wq), kernel
// threads no Dilation runs in (docs/kv.md, "At half speed").
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "dpukit/core/accounting.h"
#include "dpukit/core/channel.h"
#include "dpukit/core/process.h"
#include "dpukit/core/speed_check.h"
#include "protocol.h"

namespace dpukit::kv {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kPatience = 60s;  // a hang is a failure, not a slow run
constexpr uint32_t op(Op o) { return static_cast<uint32_t>(o); }

// A fresh directory on tmpfs (/dev/shm) where there is one, else in the
// temporary directory; removed with what is in it.
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    std::error_code ec;
    const fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    std::string tmpl = (base / "dpukit-kv-speed-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed under " + base.string());
    path = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// $DPUKIT_AGENT (an agent built otherwise, e.g. with the model's own cost
// billed again to see this test fail), else the one this build made.
std::string agent_tool() {
  const char* env = std::getenv("DPUKIT_AGENT");
  return env && *env ? env : DPUKIT_AGENT_TOOL;
}

size_t pow2_at_least(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Waits until every thread of `pid` is stopped (a group stop is reported
// once all of them took part).
bool wait_stopped(pid_t pid) {
  for (auto deadline = Clock::now() + kPatience; Clock::now() < deadline; std::this_thread::sleep_for(1ms)) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WUNTRACED | WNOHANG);
    if (r == pid && WIFSTOPPED(status)) return true;
    if (r < 0) return false;
  }
  return false;
}

struct Workload {
  size_t write_bytes;  // each kWrite's payload
  size_t writes;       // in all, spread over kFiles files
  static constexpr size_t kFiles = 4;
};
void PrintTo(const Workload& w, std::ostream* os) { *os << w.writes << " writes of " << w.write_bytes << " B"; }

// One run: a fresh agent at speed `f` on `cpu`, the workload queued while it
// is stopped, then measured from SIGCONT to the last sync_close.
SpeedSample run_agent(const Workload& w, double f, const std::string& cpu, const ScratchDir& dir) {
  const fs::path sock = dir.path / "agent.sock", log = dir.path / "agent.log";
  SpawnOptions o;
  o.log = log.string();
  ChildProcess agent = ChildProcess::spawn({agent_tool(), "--listen", sock.string(), "--no-pool", "--cpus", cpu,
                                            "--io-engine", "pwrite", "--dpu-speed",
                                            f >= 1 ? "host" : std::to_string(f)},
                                           o);
  ChannelConfig cc;
  cc.request_slots = pow2_at_least(w.writes + 4 * Workload::kFiles + 16);  // one pass queued at a time
  cc.payload_bytes = pow2_at_least(w.writes * w.write_bytes + (64 << 10));
  ChannelHost ch = [&] {
    for (auto deadline = Clock::now() + kPatience;; std::this_thread::sleep_for(5ms)) {
      try {
        return ChannelHost::connect(sock.string(), cc);
      } catch (const ChannelError&) {
        if (Clock::now() > deadline || !agent.running()) throw;
      }
    }
  }();
  auto wait_one = [&] {
    ChannelCompletion c{};
    for (auto deadline = Clock::now() + kPatience; Clock::now() < deadline;)
      if (ch.wait_completions(&c, 1, 100ms) == 1) return c;
    throw std::runtime_error("no completion came from the agent (its log: " + log.string() + ")");
  };
  ch.submit(op(Op::kHello), 0, {}, {kProtocolVersion});
  EXPECT_EQ(wait_one().status, 0);
  std::vector<uint8_t> data(w.write_bytes);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  // kFiles files from `first` on: opened (a hello after them answers once
  // the write thread has done them), then the writes and the sync_closes.
  std::vector<uint64_t> offset(2 * Workload::kFiles + 1, 0);
  auto open_files = [&](uint64_t first) {
    for (uint64_t id = first; id < first + Workload::kFiles; ++id) {
      const std::string name = (dir.path / ("file-" + std::to_string(id))).string();
      ch.submit(op(Op::kOpen), id, {reinterpret_cast<const uint8_t*>(name.data()), name.size()}, {0});
    }
    ch.submit(op(Op::kHello), 0, {}, {kProtocolVersion});
    EXPECT_EQ(wait_one().status, 0);
  };
  auto queue_writes = [&](uint64_t first) {
    for (size_t i = 0; i < w.writes; ++i) {
      const uint64_t id = first + i % Workload::kFiles;
      EXPECT_TRUE(ch.try_submit(op(Op::kWrite), id, data, {offset[id]})) << "the channel is too small to queue it all";
      offset[id] += data.size();
    }
    for (uint64_t id = first; id < first + Workload::kFiles; ++id)
      EXPECT_TRUE(ch.try_submit(op(Op::kSyncClose), id, {}, {offset[id]}));
  };
  auto wait_closes = [&] {
    for (size_t k = 0; k < Workload::kFiles; ++k) {
      const ChannelCompletion c = wait_one();
      EXPECT_EQ(c.op, op(Op::kSyncClose));
      EXPECT_EQ(c.status, 0);
      EXPECT_EQ(uint64_t(c.result), offset.at(c.id)) << "the agent wrote every byte of file " << c.id;
    }
  };
  // The same work once before, not measured: the agent's buffers and heap
  // are then as a running agent's are (its first pass faults in fresh
  // memory, more of it the further its receiver runs ahead of its writer).
  open_files(1);
  queue_writes(1);
  wait_closes();

  open_files(1 + Workload::kFiles);
  EXPECT_EQ(::kill(agent.pid(), SIGSTOP), 0);
  EXPECT_TRUE(wait_stopped(agent.pid())) << "the agent did not stop";
  queue_writes(1 + Workload::kFiles);
  const uint64_t cpu0 = process_cpu_ns(agent.pid()), t0 = now_ns();
  EXPECT_EQ(::kill(agent.pid(), SIGCONT), 0);
  wait_closes();
  const uint64_t t1 = now_ns(), cpu1 = process_cpu_ns(agent.pid());

  ch.close();
  agent.kill(SIGTERM);
  if (!agent.wait_for(std::chrono::duration_cast<std::chrono::milliseconds>(kPatience))) {
    agent.kill(SIGKILL);
    agent.wait();
    ADD_FAILURE() << "the agent did not exit";
  }
  for (uint64_t id = 1; id <= 2 * Workload::kFiles; ++id) fs::remove(dir.path / ("file-" + std::to_string(id)));
  return {double(w.writes) * 1e9 / double(t1 - t0), double(cpu1 - cpu0) / double(w.writes)};
}

class AgentDpuSpeed : public testing::TestWithParam<Workload> {};

// The agent on one CPU, this thread on another, so that the host side's
// wait for the last reply does not take the agent's CPU. 25 pairs: on this
// shared 2-vCPU VM single pairs ranged 0.24-2.5x in throughput (the agent's
// CPU taken by other work for part of a run), and with 15 pairs one check
// in six missed the throughput bound in all three attempts while its CPU
// medians (2.02-2.08x) held.
TEST_P(AgentDpuSpeed, TheAgentAtHalfSpeedKeepsTheModelsPromise) {
  const CpuSet all = available_cpus();
  const std::string agent_cpu = std::to_string(all.cpus.back());
  CpuSet host;
  for (int c : all.cpus)
    if (all.cpus.size() == 1 || c != all.cpus.back()) host.cpus.push_back(c);
  pin_current_thread(host);
  ScratchDir dir;
  const Workload w = GetParam();
  const SpeedCheck c =
      paired_speed_check_with_retry([&](double f) { return run_agent(w, f, agent_cpu, dir); }, 0.5, 25);
  pin_current_thread(all);
  RecordProperty("throughput_ratio", std::to_string(c.median_throughput_ratio()));
  RecordProperty("cpu_ratio", std::to_string(c.median_cpu_ratio()));
  EXPECT_TRUE(c.within()) << c.describe();
}

INSTANTIATE_TEST_SUITE_P(Writes, AgentDpuSpeed,
                         testing::Values(Workload{4096, 16384}, Workload{512, 65536}),
                         [](const testing::TestParamInfo<Workload>& i) {
                           return std::to_string(i.param.write_bytes) + "B";
                         });

}  // namespace
}  // namespace dpukit::kv
