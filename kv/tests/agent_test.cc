// The agent: as a library in this process (dpukit/kv_agent.h), and the
// dpukit-agent binary as a process of its own: end to end over a real
// channel, its signals, its exit codes, and what happens when either side dies.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "temp_dir.h"
#include "dpukit/core/channel.h"
#include "dpukit/core/process.h"
#include "dpukit/kv_agent.h"
#include "protocol.h"

namespace dpukit::kv {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A hang is a failure, not a slow run: every wait gives up after this.
constexpr auto kPatience = 60s;

template <class Pred>
bool eventually(Pred pred) {
  for (auto deadline = Clock::now() + kPatience; Clock::now() < deadline; std::this_thread::sleep_for(10ms))
    if (pred()) return true;
  return pred();
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The agent binary as a child process, its output in a file; killed at the
// end of the test if it is still running.
struct AgentProcess {
  fs::path socket, err;
  ChildProcess proc;  // killed and reaped when the test ends, if still running

  AgentProcess(const fs::path& dir, const std::string& name, std::vector<std::string> args)
      : socket(dir / (name + ".sock")), err(dir / (name + ".err")) {
    args.insert(args.begin(), {DPUKIT_AGENT_TOOL, "--listen", socket.string()});
    SpawnOptions o;
    o.log = err.string();
    proc = ChildProcess::spawn(args, o);
  }
  // Its wait status, once it exited (killed if it does not within kPatience).
  int wait_exit() {
    if (!proc.wait_for(std::chrono::duration_cast<std::chrono::milliseconds>(kPatience))) {
      proc.kill(SIGKILL);
      proc.wait();
      ADD_FAILURE() << "the agent did not exit";
    }
    return proc.status();
  }
  void signal(int sig) const { ASSERT_EQ(::kill(proc.pid(), sig), 0); }
  // Connects once the agent listens (it may still be preparing its pool).
  ChannelHost connect() const {
    for (auto deadline = Clock::now() + kPatience;; std::this_thread::sleep_for(10ms)) {
      try {
        return ChannelHost::connect(socket.string());
      } catch (const ChannelError&) {
        if (Clock::now() > deadline) throw;
      }
    }
  }
};

constexpr uint32_t op(Op o) { return static_cast<uint32_t>(o); }

ChannelCompletion wait_one(ChannelHost& ch) {
  ChannelCompletion c{};
  for (auto deadline = Clock::now() + kPatience; Clock::now() < deadline;)
    if (ch.wait_completions(&c, 1, 100ms) == 1) return c;
  throw std::runtime_error("no completion came");
}

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

void send_open(ChannelHost& ch, uint64_t id, const fs::path& name, bool use_pool) {
  std::string s = name.string();
  ch.submit(op(Op::kOpen), id, {reinterpret_cast<const uint8_t*>(s.data()), s.size()},
            {use_pool ? uint64_t{kUsePool} : uint64_t{0}});
}

// Opens `name` and sends `data` in 64 KiB writes with a range_sync after each.
void send_file(ChannelHost& ch, uint64_t id, const fs::path& name, const std::vector<uint8_t>& data, bool use_pool) {
  send_open(ch, id, name, use_pool);
  constexpr size_t kChunk = 64 << 10;
  for (size_t off = 0; off < data.size(); off += kChunk) {
    size_t len = std::min(kChunk, data.size() - off);
    ch.submit(op(Op::kWrite), id, std::span(data).subspan(off, len), {off});
    ch.submit(op(Op::kRangeSync), id, {}, {off, len});
  }
}

// The whole life of one file: its sync_close completion.
ChannelCompletion write_file(ChannelHost& ch, uint64_t id, const fs::path& name, const std::vector<uint8_t>& data,
                             bool use_pool) {
  send_file(ch, id, name, data, use_pool);
  ch.submit(op(Op::kSyncClose), id, {}, {data.size()});
  return wait_one(ch);
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::string s = read_text(p);
  return std::vector<uint8_t>(s.begin(), s.end());
}

// The agent's statistics: a dpukit.result/1 whose figures are its counters.
nlohmann::json read_stats(const fs::path& stats) {
  nlohmann::json r = nlohmann::json::parse(read_text(stats));
  EXPECT_EQ(r["schema"], "dpukit.result/1");
  EXPECT_EQ(r["tool"], "dpukit-agent");
  EXPECT_TRUE(r["cpu_ns"]["dpu"].is_number());
  return r["figures"];
}

nlohmann::json stats_after_sigusr1(const AgentProcess& agent, const fs::path& stats) {
  fs::remove(stats);
  agent.signal(SIGUSR1);
  EXPECT_TRUE(eventually([&] { return fs::exists(stats); })) << "no statistics after SIGUSR1";
  return read_stats(stats);
}

// ------------------------------------------------------------ the library

// What the tool's loop does for one host: the host connects from a thread of
// its own (its handshake waits for accept), the agent takes it.
ChannelHost connect_host(Agent& agent, const std::string& socket) {
  std::optional<ChannelHost> host;
  std::exception_ptr failed;
  std::thread connecting([&] {
    try {
      host.emplace(ChannelHost::connect(socket));
    } catch (...) {
      failed = std::current_exception();
    }
  });
  pollfd fd = {agent.listen_fd(), POLLIN, 0};
  if (::poll(&fd, 1, static_cast<int>(std::chrono::milliseconds(kPatience).count())) == 1) agent.accept();
  connecting.join();
  if (failed) std::rethrow_exception(failed);
  return std::move(*host);
}

nlohmann::json agent_figures(const Agent& agent, const fs::path& stats) {
  fs::remove(stats);
  agent.write_stats();
  return read_stats(stats);
}

AgentOptions agent_options(const TempDir& t, bool pool) {
  AgentOptions o;
  o.command_line = {"agent_test"};
  o.listen = t.str("agent.sock");
  o.stats = t.str("stats.json");
  if (pool) o.pool = AgentOptions::Pool{t.str("pool"), 4, 1 << 20};
  return o;
}

TEST(AgentLibrary, ServesAQueuePairCountsItAndStops) {
  TempDir t;
  const AgentOptions o = agent_options(t, true);
  Agent agent(o);
  EXPECT_TRUE(fs::exists(o.listen)) << "it listens once the pool is made";
  ChannelHost ch = connect_host(agent, o.listen);
  auto data = random_bytes(200'000, 11);
  ChannelCompletion c = write_file(ch, 1, t.path / "000009.sst", data, true);
  EXPECT_EQ(c.status, 0);
  EXPECT_NE(c.arg, kNoSlot);
  EXPECT_TRUE(read_bytes(t.path / "000009.sst") == data);

  nlohmann::json j = agent_figures(agent, o.stats);
  EXPECT_EQ(j["queue_pairs"]["accepted"], 1);
  EXPECT_EQ(j["queue_pairs"]["active"], 1);
  EXPECT_EQ(j["write_bytes"], data.size());
  EXPECT_EQ(j["pool"]["slots"], 4);
  EXPECT_EQ(j["pool"]["claims"], 1);

  ch.close();
  EXPECT_TRUE(eventually([&] {
    agent.reap();
    return agent_figures(agent, o.stats)["queue_pairs"]["active"] == 0;
  })) << "a queue pair its host closed is reaped";
  agent.stop();
  EXPECT_FALSE(fs::exists(o.listen)) << "the socket file goes when it stops taking hosts";
  agent.stop();  // idempotent
}

// An agent that goes away with queue pairs open lets them finish first: the
// unfinished file is recycled, the host sees the end.
TEST(AgentLibrary, DestroyedWithAQueuePairOpenItStopsItFirst) {
  TempDir t;
  const AgentOptions o = agent_options(t, false);
  std::optional<Agent> agent(std::in_place, o);
  ChannelHost ch = connect_host(*agent, o.listen);
  send_file(ch, 1, t.path / "unfinished.sst", random_bytes(100'000, 12), true);
  ch.submit(op(Op::kHello), 2, {}, {kProtocolVersion});
  wait_one(ch);  // the agent has taken everything before it
  agent.reset();
  EXPECT_FALSE(fs::exists(fs::symlink_status(t.path / "unfinished.sst")));
  ChannelCompletion c;
  EXPECT_THROW(ch.wait_completions(&c, 1, kPatience), ChannelError);
}

TEST(AgentLibrary, AQuarantinedSlotIsReleasedOnlyWhenNoAgentHoldsThePool) {
  TempDir t;
  const AgentOptions o = agent_options(t, true);
  const fs::path db = t.path / "db", sst = db / "000009.sst";
  fs::create_directories(db);
  {
    Agent agent(o);
    ChannelHost ch = connect_host(agent, o.listen);
    ASSERT_EQ(write_file(ch, 1, sst, random_bytes(50'000, 13), true).status, 0);
    try {
      release_quarantined_slot(o.pool->dir, 0);
      ADD_FAILURE() << "released a slot of a pool an agent holds";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("in use by another process"), std::string::npos) << e.what();
    }
  }
  fs::rename(db, t.path / "db.away");  // the owner is gone: its slot cannot be shown free
  {
    Agent agent(o);
    nlohmann::json j = agent_figures(agent, o.stats);
    EXPECT_EQ(j["pool"]["quarantined"], 1) << j.dump(2);
    EXPECT_EQ(j["pool"]["quarantine"][0]["owner"], sst.string());
  }
  PoolCheck check = check_pool(o.pool->dir);
  ASSERT_TRUE(check.usable) << check.problem;
  ASSERT_EQ(check.reports.size(), 4u);
  EXPECT_EQ(check.reports[0].verdict, PoolCheck::Verdict::kQuarantined);
  EXPECT_STREQ(verdict_name(check.reports[0].verdict), "quarantined");

  SlotRelease r = release_quarantined_slot(o.pool->dir, 0);
  ASSERT_TRUE(r.released);
  EXPECT_EQ(r.released->slot, 0u);
  EXPECT_EQ(r.released->owner, sst.string());
  EXPECT_EQ(r.released->bytes, 50'000u);
  EXPECT_EQ(r.slots, 4u);
  EXPECT_FALSE(release_quarantined_slot(o.pool->dir, 0).released) << "free now";
  EXPECT_FALSE(release_quarantined_slot(o.pool->dir, 9).released) << "no such slot";
  EXPECT_TRUE(check_pool(o.pool->dir).findings.empty());
}

// ------------------------------------------------------------ the binary

TEST(Agent, WritesAPoolFileEndToEndAndReportsStatsOnSignalAndExit) {
  TempDir t;
  fs::path pool = t.path / "pool", stats = t.path / "stats.json", sst = t.path / "000009.sst";
  AgentProcess agent(t.path, "agent",
                     {"--pool", pool.string(), "--slots", "4", "--slot-size", "1MiB", "--stats", stats.string()});
  ChannelHost ch = agent.connect();
  ch.submit(op(Op::kHello), 77, {}, {kProtocolVersion});
  ChannelCompletion hello = wait_one(ch);
  EXPECT_EQ(hello.id, 77u);
  EXPECT_EQ(hello.status, 0);
  auto data = random_bytes(300'000, 1);
  ChannelCompletion c = write_file(ch, 1, sst, data, true);
  EXPECT_EQ(c.op, op(Op::kSyncClose));
  EXPECT_EQ(c.status, 0);
  EXPECT_EQ(c.result, static_cast<int64_t>(data.size()));
  ASSERT_NE(c.arg, kNoSlot);
  ASSERT_TRUE(fs::is_symlink(sst));
  EXPECT_EQ(fs::read_symlink(sst).parent_path(), fs::canonical(pool));
  EXPECT_EQ(fs::file_size(sst), data.size());
  EXPECT_TRUE(read_bytes(sst) == data);

  nlohmann::json j = stats_after_sigusr1(agent, stats);
  EXPECT_EQ(j["requests"], 1 + 1 + 5 * 2 + 1) << j.dump(2);  // hello, open, 5 writes + range_syncs, sync_close
  EXPECT_EQ(j["write_bytes"], data.size());
  EXPECT_EQ(j["pool_files"], 1);
  EXPECT_EQ(j["queue_pairs"]["active"], 1);
  EXPECT_EQ(j["pool"]["slots"], 4);
  EXPECT_EQ(j["pool"]["free"], 3);
  EXPECT_EQ(j["pool"]["claims"], 1);
  EXPECT_GE(j["io_uring"]["sqes_submitted"].get<uint64_t>(), 5u + 5u + 2u);

  ch.close();
  agent.signal(SIGTERM);
  int status = agent.wait_exit();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << read_text(agent.err);
  j = read_stats(stats);
  EXPECT_EQ(j["queue_pairs"]["accepted"], 1);
  EXPECT_EQ(j["queue_pairs"]["active"], 0) << "written again at exit";
  EXPECT_FALSE(fs::exists(agent.socket)) << "the socket file is removed";
  EXPECT_TRUE(fs::is_symlink(sst)) << "a finished file outlives the agent";
}

TEST(Agent, WithoutAPoolWritesNormalFilesAndStopsOnSigint) {
  TempDir t;
  fs::path sst = t.path / "000010.sst";
  AgentProcess agent(t.path, "agent", {"--no-pool"});
  ChannelHost ch = agent.connect();
  auto data = random_bytes(100'000, 2);
  ChannelCompletion c = write_file(ch, 1, sst, data, true);
  EXPECT_EQ(c.status, 0);
  EXPECT_EQ(c.arg, kNoSlot);
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(sst)));
  EXPECT_TRUE(read_bytes(sst) == data);
  agent.signal(SIGINT);
  int status = agent.wait_exit();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_text(agent.err);
}

TEST(Agent, KilledAgentIsSeenByTheHostAndItsPoolOpensAgain) {
  TempDir t;
  fs::path pool = t.path / "pool";
  std::vector<std::string> args = {"--pool", pool.string(), "--slots", "4", "--slot-size", "1MiB"};
  auto agent = std::make_unique<AgentProcess>(t.path, "first", args);
  ChannelHost ch = agent->connect();
  send_file(ch, 1, t.path / "unfinished.sst", random_bytes(100'000, 3), true);
  ch.submit(op(Op::kHello), 2, {}, {kProtocolVersion});
  wait_one(ch);  // the agent has taken everything before it
  agent->signal(SIGKILL);
  agent->wait_exit();
  ChannelCompletion c;
  EXPECT_THROW(ch.wait_completions(&c, 1, kPatience), ChannelError);

  AgentProcess again(t.path, "second", args);  // the dead agent's lock went with it
  ChannelHost ch2 = again.connect();
  ChannelCompletion done = write_file(ch2, 1, t.path / "next.sst", random_bytes(1000, 4), true);
  EXPECT_EQ(done.status, 0);
}

// The child: a host that starts a file and dies without closing the channel.
[[noreturn]] void run_dying_host(const AgentProcess& agent, const fs::path& name) {
  try {
    ChannelHost ch = agent.connect();
    send_file(ch, 1, name, random_bytes(200'000, 5), true);
    ch.submit(op(Op::kHello), 2, {}, {kProtocolVersion});
    wait_one(ch);
    std::_Exit(fs::is_symlink(name) ? 0 : 4);  // no destructor closes the channel
  } catch (...) {
    std::_Exit(2);
  }
}

TEST(Agent, AHostThatDiesEndsOnlyItsOwnQueuePair) {
  TempDir t;
  fs::path pool = t.path / "pool", stats = t.path / "stats.json", dead = t.path / "dead.sst";
  AgentProcess agent(t.path, "agent",
                     {"--pool", pool.string(), "--slots", "4", "--slot-size", "1MiB", "--stats", stats.string()});
  pid_t child = ::fork();  // this test process has no other thread now
  ASSERT_GE(child, 0);
  if (child == 0) run_dying_host(agent, dead);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the dying host failed before it died";
  EXPECT_TRUE(eventually([&] { return !fs::exists(fs::symlink_status(dead)); }))
      << "the dead host's unfinished file is removed";

  ChannelHost ch = agent.connect();
  auto data = random_bytes(50'000, 6);
  ChannelCompletion c = write_file(ch, 1, t.path / "alive.sst", data, true);
  EXPECT_EQ(c.status, 0);
  EXPECT_TRUE(read_bytes(t.path / "alive.sst") == data);
  nlohmann::json j = stats_after_sigusr1(agent, stats);
  EXPECT_EQ(j["queue_pairs"]["accepted"], 2);
  EXPECT_EQ(j["queue_pairs"]["active"], 1);
  EXPECT_EQ(j["pool"]["free"], 3) << "the dead host's slot is free again";
  EXPECT_EQ(j["pool"]["released"], 1);
  EXPECT_NE(read_text(agent.err).find("is gone"), std::string::npos) << "the host's death is logged";
}

// --dpu-speed: the agent's threads stay busy for the dpu's slower core after
// each request and pull, counted in figures.dilated_ns; at host speed nothing
// is added. The speed is recorded in placement.dpu_speed.
TEST(Agent, DilatesItsWorkToTheDpuSpeedAndRecordsIt) {
  for (const std::string speed : {"0.25", "host"}) {
    SCOPED_TRACE("--dpu-speed " + speed);
    TempDir t;
    fs::path stats = t.path / "stats.json";
    AgentProcess agent(t.path, "agent",
                       {"--no-pool", "--dpu-speed", speed, "--stats", stats.string()});
    ChannelHost ch = agent.connect();
    auto data = random_bytes(1 << 20, 8);
    ChannelCompletion c = write_file(ch, 1, t.path / "000011.sst", data, true);
    ASSERT_EQ(c.status, 0);
    EXPECT_TRUE(read_bytes(t.path / "000011.sst") == data);
    ch.close();
    agent.signal(SIGTERM);
    int status = agent.wait_exit();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_text(agent.err);
    nlohmann::json r = nlohmann::json::parse(read_text(stats));
    const uint64_t dilated = r["figures"]["dilated_ns"].get<uint64_t>();
    if (speed == "host") {
      EXPECT_EQ(r["placement"]["dpu_speed"]["factor"], 1.0);
      EXPECT_EQ(dilated, 0u);
    } else {
      EXPECT_EQ(r["placement"]["dpu_speed"]["factor"], 0.25);
      EXPECT_EQ(r["placement"]["dpu_speed"]["name"], "0.25");
      EXPECT_GT(dilated, 0u) << r.dump(2);
      // The added time is real CPU time of the agent: its dpu account holds it.
      EXPECT_GE(r["cpu_ns"]["dpu"].get<uint64_t>(), dilated);
    }
  }
}

// --io-engine (PulseDB §IV-E): the same bytes reach the pool file through
// each engine; the result says which ran.
TEST(Agent, WritesThroughEachIoEngine) {
  for (const std::string engine : {"io_uring", "io_uring-sqpoll", "libaio", "pwrite"}) {
    SCOPED_TRACE("--io-engine " + engine);
    TempDir t;
    fs::path pool = t.path / "pool", stats = t.path / "stats.json", sst = t.path / "000013.sst";
    AgentProcess agent(t.path, "agent", {"--pool", pool.string(), "--slots", "2", "--slot-size", "1MiB",
                                         "--io-engine", engine, "--stats", stats.string()});
    ChannelHost ch = agent.connect();
    auto data = random_bytes(700'000, 9);
    ChannelCompletion c = write_file(ch, 1, sst, data, true);
    ASSERT_EQ(c.status, 0);
    EXPECT_EQ(c.result, static_cast<int64_t>(data.size()));
    EXPECT_TRUE(read_bytes(sst) == data);
    EXPECT_EQ(fs::file_size(sst), data.size());
    ch.close();
    agent.signal(SIGTERM);
    int status = agent.wait_exit();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_text(agent.err);
    nlohmann::json r = nlohmann::json::parse(read_text(stats));
    EXPECT_EQ(r["parameters"]["io_engine"], engine);
    EXPECT_EQ(r["figures"]["io_uring"]["sqes_submitted"], r["figures"]["io_uring"]["cqes_completed"]);
    // libaio's sync_file_range and close are system calls; only libaio counts them
    EXPECT_EQ(r["figures"]["io_uring"]["aio_sync_calls"].get<uint64_t>() > 0, engine == "libaio");
  }
}

// `dpukit-agent pool ...` run to its end: its exit code and its output.
struct ToolRun {
  int code;
  std::string out;
};
ToolRun run_pool_command(const fs::path& dir, const std::string& name, std::vector<std::string> args) {
  args.insert(args.begin(), {DPUKIT_AGENT_TOOL, "pool"});
  SpawnOptions o;
  o.log = (dir / (name + ".out")).string();
  ChildProcess p = ChildProcess::spawn(args, o);
  if (!p.wait_for(std::chrono::duration_cast<std::chrono::milliseconds>(kPatience))) {
    p.kill(SIGKILL);
    p.wait();
    ADD_FAILURE() << "dpukit-agent pool " << args[2] << " did not exit";
  }
  int status = p.status();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(o.log)};
}

// The operator's side of quarantine: the agent reports the slot it kept (log,
// statistics), `pool check` finds it (exit 1), and `pool release` frees it
// once the agent is stopped.
TEST(Agent, AQuarantinedSlotIsReportedCheckedAndReleasedByAnOperator) {
  TempDir t;
  fs::path pool = t.path / "pool", stats = t.path / "stats.json", db = t.path / "db";
  fs::create_directories(db);
  const fs::path sst = db / "000009.sst";
  std::vector<std::string> args = {"--pool", pool.string(), "--slots", "4", "--slot-size", "1MiB", "--stats",
                                   stats.string()};
  {
    AgentProcess agent(t.path, "first", args);
    ChannelHost ch = agent.connect();
    ASSERT_EQ(write_file(ch, 1, sst, random_bytes(50'000, 7), true).status, 0);
    ToolRun clean = run_pool_command(t.path, "clean", {"check", "--pool", pool.string(), "--db", db.string()});
    EXPECT_EQ(clean.code, 0) << clean.out;
    EXPECT_NE(clean.out.find("held by a running agent"), std::string::npos) << clean.out;
    EXPECT_NE(clean.out.find("1 in use, 3 free"), std::string::npos) << clean.out;
    ToolRun busy = run_pool_command(t.path, "busy", {"release", "0", "--pool", pool.string()});
    EXPECT_EQ(busy.code, 1) << busy.out;
    EXPECT_NE(busy.out.find("--agent SOCKET"), std::string::npos) << busy.out;
    ch.close();
    agent.signal(SIGTERM);
    agent.wait_exit();
  }
  fs::rename(db, t.path / "db.away");
  {
    AgentProcess agent(t.path, "second", args);
    agent.connect();
    nlohmann::json j = stats_after_sigusr1(agent, stats);
    EXPECT_EQ(j["pool"]["quarantined"], 1) << j.dump(2);
    EXPECT_EQ(j["pool"]["reclaimed"], 0);
    EXPECT_EQ(j["pool"]["free"], 3);
    ASSERT_EQ(j["pool"]["quarantine"].size(), 1u) << j.dump(2);
    EXPECT_EQ(j["pool"]["quarantine"][0]["owner"], sst.string());
    EXPECT_EQ(j["pool"]["quarantine"][0]["bytes"], 50'000);
    std::string log = read_text(agent.err);
    EXPECT_NE(log.find("slot-000000 quarantined: " + sst.string() + " is missing"), std::string::npos) << log;
    EXPECT_NE(log.find("1 quarantined"), std::string::npos) << log;
    ToolRun found = run_pool_command(t.path, "found", {"check", "--pool", pool.string()});
    EXPECT_EQ(found.code, 1) << found.out;
    EXPECT_NE(found.out.find("finding: slot-000000 quarantined"), std::string::npos) << found.out;
    ToolRun json = run_pool_command(t.path, "json", {"check", "--pool", pool.string(), "--json"});
    EXPECT_EQ(json.code, 1);
    nlohmann::json report = nlohmann::json::parse(json.out);
    EXPECT_EQ(report["slot_reports"][0]["verdict"], "quarantined") << json.out;
    EXPECT_EQ(report["in_use"], true);
    agent.signal(SIGTERM);
    agent.wait_exit();
  }
  ToolRun released = run_pool_command(t.path, "release", {"release", "0", "--pool", pool.string()});
  EXPECT_EQ(released.code, 0) << released.out;
  EXPECT_NE(released.out.find("released slot-000000: 50000 bytes dropped"), std::string::npos) << released.out;
  EXPECT_EQ(fs::file_size(pool / "slot-000000"), 1u << 20) << "written out again (1MiB slots)";
  ToolRun again = run_pool_command(t.path, "again", {"release", "slot-000000", "--pool", pool.string()});
  EXPECT_EQ(again.code, 1) << again.out;
  EXPECT_NE(again.out.find("is not quarantined"), std::string::npos) << again.out;
  ToolRun after = run_pool_command(t.path, "after", {"check", "--pool", pool.string()});
  EXPECT_EQ(after.code, 0) << after.out;
  EXPECT_NE(after.out.find("0 in use, 4 free"), std::string::npos) << after.out;

  EXPECT_EQ(run_pool_command(t.path, "nopool", {"check", "--pool", (t.path / "none").string()}).code, 2);
  fs::create_directories(t.path / "junk");
  std::ofstream(t.path / "junk" / "pool.index") << "not an index";
  ToolRun junk = run_pool_command(t.path, "junk", {"check", "--pool", (t.path / "junk").string()});
  EXPECT_EQ(junk.code, 2);
  EXPECT_NE(junk.out.find("is not an SST pool index"), std::string::npos) << junk.out;
  EXPECT_EQ(run_pool_command(t.path, "noslot", {"release", "--pool", pool.string()}).code, 2);
  EXPECT_EQ(run_pool_command(t.path, "badslot", {"release", "x7", "--pool", pool.string()}).code, 2);
  EXPECT_EQ(run_pool_command(t.path, "unknown", {"frobnicate"}).code, 2);
}

// `pool release --agent`: the running agent that holds the pool frees a
// quarantined slot (a queue pair of the operator's own); it refuses a slot in
// use (the file stays whole) and a pool it does not hold, and a slot it
// freed is not quarantined any more.
TEST(Agent, AQuarantinedSlotIsReleasedThroughTheRunningAgent) {
  TempDir t;
  fs::path pool = t.path / "pool", db = t.path / "db", stats = t.path / "stats.json";
  fs::create_directories(db);
  const fs::path sst = db / "000009.sst", live = db / "000010.sst";
  std::vector<std::string> args = {"--pool", pool.string(), "--slots", "4", "--slot-size", "1MiB", "--stats",
                                   stats.string()};
  {
    AgentProcess agent(t.path, "first", args);
    ChannelHost ch = agent.connect();
    ASSERT_EQ(write_file(ch, 1, sst, random_bytes(50'000, 21), true).status, 0);
    ch.close();
    agent.signal(SIGTERM);
    agent.wait_exit();
  }
  fs::rename(db, t.path / "db.away");  // slot 0's owner is gone with its directory: quarantined
  fs::create_directories(db);
  AgentProcess agent(t.path, "second", args);
  ChannelHost ch = agent.connect();
  const auto data = random_bytes(70'000, 22);
  ASSERT_EQ(write_file(ch, 2, live, data, true).status, 0);
  const std::string live_slot = fs::read_symlink(live).filename().string();
  ASSERT_NE(live_slot, "slot-000000");
  ASSERT_EQ(stats_after_sigusr1(agent, stats)["pool"]["quarantined"], 1);

  AgentProcess other(t.path, "other", {"--pool", (t.path / "pool2").string(), "--slots", "2", "--slot-size", "1MiB"});
  other.connect();
  ToolRun wrong = run_pool_command(t.path, "wrong",
                                   {"release", "0", "--pool", pool.string(), "--agent", other.socket.string()});
  EXPECT_EQ(wrong.code, 1) << wrong.out;
  EXPECT_NE(wrong.out.find("does not hold the pool"), std::string::npos) << wrong.out;

  ToolRun in_use = run_pool_command(t.path, "in-use",
                                    {"release", live_slot, "--pool", pool.string(), "--agent", agent.socket.string()});
  EXPECT_EQ(in_use.code, 1) << in_use.out;
  EXPECT_NE(in_use.out.find("is not quarantined"), std::string::npos) << in_use.out;
  EXPECT_EQ(read_bytes(live), data) << "a slot in use is never released by hand";

  ToolRun released = run_pool_command(t.path, "released",
                                      {"release", "0", "--pool", pool.string(), "--agent", agent.socket.string()});
  EXPECT_EQ(released.code, 0) << released.out;
  EXPECT_NE(released.out.find("released slot-000000: 50000 bytes dropped (owner " + sst.string()), std::string::npos)
      << released.out;
  nlohmann::json j = stats_after_sigusr1(agent, stats);
  EXPECT_EQ(j["pool"]["quarantined"], 0) << j.dump(2);
  EXPECT_EQ(j["pool"]["released"], 1) << j.dump(2);
  EXPECT_EQ(j["pool"]["free"], 3) << j.dump(2);
  EXPECT_EQ(fs::file_size(pool / "slot-000000"), 1u << 20) << "written out again (1MiB slots)";
  ToolRun again = run_pool_command(t.path, "again",
                                   {"release", "0", "--pool", pool.string(), "--agent", agent.socket.string()});
  EXPECT_EQ(again.code, 1) << again.out;
  EXPECT_NE(again.out.find("is not quarantined"), std::string::npos) << again.out;
  ToolRun check = run_pool_command(t.path, "check", {"check", "--pool", pool.string(), "--db", db.string()});
  EXPECT_EQ(check.code, 0) << check.out;
  EXPECT_NE(check.out.find("1 in use, 3 free"), std::string::npos) << check.out;
  ch.close();
  agent.signal(SIGTERM);
  EXPECT_EQ(agent.wait_exit(), 0);
}

TEST(Agent, PoolProblemsExit1AndBadArgumentsExit2) {
  TempDir t;
  fs::path pool = t.path / "pool";
  AgentProcess first(t.path, "first", {"--pool", pool.string(), "--slots", "4", "--slot-size", "1MiB"});
  first.connect();  // the pool is open

  auto exit_code = [&](const std::string& name, std::vector<std::string> args) {
    AgentProcess p(t.path, name, std::move(args));
    int status = p.wait_exit();
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(exit_code("busy", {"--pool", pool.string(), "--slots", "4", "--slot-size", "1MiB"}), 1);
  std::string busy = read_text(t.path / "busy.err");
  EXPECT_NE(busy.find("pool " + fs::canonical(pool).string() + " is in use by another process"), std::string::npos)
      << busy;
  first.signal(SIGTERM);
  first.wait_exit();
  EXPECT_EQ(exit_code("geometry", {"--pool", pool.string(), "--slots", "8", "--slot-size", "1MiB"}), 1);
  EXPECT_NE(read_text(t.path / "geometry.err").find("created with 4 slots"), std::string::npos)
      << read_text(t.path / "geometry.err");

  EXPECT_EQ(exit_code("noslots", {"--pool", pool.string(), "--slots", "0"}), 2);
  EXPECT_EQ(exit_code("nopool", {}), 2);
  EXPECT_NE(read_text(t.path / "nopool.err").find("--pool DIR is required"), std::string::npos);
  EXPECT_EQ(exit_code("badcpus", {"--no-pool", "--cpus", "x"}), 2);
  EXPECT_EQ(exit_code("badspeed", {"--no-pool", "--dpu-speed", "2"}), 2);
  EXPECT_EQ(exit_code("badengine", {"--no-pool", "--io-engine", "spdk"}), 2);
  EXPECT_NE(read_text(t.path / "badengine.err").find("io_uring, io_uring-sqpoll, libaio or pwrite"), std::string::npos);
  EXPECT_EQ(exit_code("unknown", {"--no-pool", "--frobnicate"}), 2);
  EXPECT_EQ(exit_code("help", {"--help"}), 0);
  EXPECT_NE(read_text(t.path / "help.err").find("usage: dpukit-agent"), std::string::npos);
}

}  // namespace
}  // namespace dpukit::kv
