#include "dpukit/core/process.h"

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace dpukit {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "dpukit-process-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Process, OwnExecutableIsThisTestBinary) {
  EXPECT_EQ(own_executable().filename(), "core_tests");
  EXPECT_TRUE(fs::is_regular_file(own_executable()));
}

// The child runs on the CPUs asked for, finds argv[0] in PATH, writes both
// output streams to the log, sees the added variable beside the inherited
// ones, and its exit status comes back.
TEST(Process, SpawnsPinnedWithItsOutputInTheLogAndReportsTheExit) {
  TempDir t;
  CpuSet last{{available_cpus().cpus.back()}};
  SpawnOptions o;
  o.cpus = last;
  o.log = (t.path / "child.log").string();
  o.env = {{"DPUKIT_PROCESS_TEST", "a b"}};
  ChildProcess c = ChildProcess::spawn(
      {"sh", "-c",
       "echo out; echo err >&2; grep Cpus_allowed_list /proc/self/status; echo \"var=$DPUKIT_PROCESS_TEST\"; "
       "test -n \"$PATH\" && echo has-path; exit 3"},
      o);
  EXPECT_GT(c.pid(), 0);
  ASSERT_TRUE(c.wait_for(std::chrono::seconds(20)));
  EXPECT_TRUE(c.exited());
  EXPECT_FALSE(c.succeeded());
  EXPECT_EQ(c.exit_text(), "exited with status 3");
  std::string log = slurp(o.log);
  EXPECT_NE(log.find("out\n"), std::string::npos) << log;
  EXPECT_NE(log.find("err\n"), std::string::npos) << log;
  EXPECT_NE(log.find("Cpus_allowed_list:\t" + last.str() + "\n"), std::string::npos) << log;
  EXPECT_NE(log.find("var=a b\n"), std::string::npos) << log;
  EXPECT_NE(log.find("has-path\n"), std::string::npos) << log;
}

// A child of a pinned thread gets every CPU the process was started with.
TEST(Process, ChildOfAPinnedThreadIsNotPinnedWithIt) {
  if (available_cpus().cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  TempDir t;
  std::string log = (t.path / "child.log").string();
  std::thread([&] {
    ASSERT_EQ(pin_current_thread(CpuSet{{available_cpus().cpus.front()}}), "");
    SpawnOptions o;
    o.log = log;
    ChildProcess c = ChildProcess::spawn({"grep", "Cpus_allowed_list", "/proc/self/status"}, o);
    c.wait();
    EXPECT_TRUE(c.succeeded()) << c.exit_text();
  }).join();
  EXPECT_NE(slurp(log).find("Cpus_allowed_list:\t" + available_cpus().str() + "\n"), std::string::npos)
      << slurp(log);
}

TEST(Process, ReportsTheChildsCpuTime) {
  ChildProcess c = ChildProcess::spawn({"sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"});
  c.wait();
  EXPECT_TRUE(c.succeeded()) << c.exit_text();
  EXPECT_GT(c.cpu_ns(), 20'000'000u);
}

TEST(Process, AKilledChildIsReportedBySignal) {
  ChildProcess c = ChildProcess::spawn({"sleep", "30"});
  EXPECT_TRUE(c.running());
  EXPECT_EQ(c.exit_text(), "running");
  EXPECT_FALSE(c.wait_for(std::chrono::milliseconds(20)));
  c.kill(SIGKILL);
  ASSERT_TRUE(c.wait_for(std::chrono::seconds(10)));
  EXPECT_FALSE(c.running());
  EXPECT_EQ(c.exit_text(), "killed by signal 9");
}

TEST(Process, AProgramThatCannotRunIsAnError) {
  try {
    ChildProcess::spawn({"/nonexistent/dpukit-no-such-program"});
    FAIL() << "spawned a program that does not exist";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot run /nonexistent/dpukit-no-such-program"), std::string::npos)
        << e.what();
  }
}

TEST(Process, DestroyingARunningChildKillsIt) {
  pid_t pid;
  {
    ChildProcess c = ChildProcess::spawn({"sleep", "30"});
    pid = c.pid();
    ChildProcess moved = std::move(c);  // the moved-from one owns nothing
    EXPECT_EQ(c.pid(), -1);
    EXPECT_EQ(moved.pid(), pid);
  }
  EXPECT_EQ(::kill(pid, 0), -1) << "the child outlived its ChildProcess";
  EXPECT_EQ(errno, ESRCH);
}

// A child spawned with die_with_parent goes when the process that spawned it
// dies: here a middle process spawns it and exits; this test process, a
// subreaper, inherits the orphan and sees how it ended.
TEST(Process, DiesWithParentWhenAsked) {
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t middle = ::fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    SpawnOptions o;
    o.die_with_parent = true;
    ChildProcess c = ChildProcess::spawn({"sleep", "20"}, o);
    pid_t pid = c.pid();
    [[maybe_unused]] ssize_t w = ::write(fds[1], &pid, sizeof(pid));
    ::_exit(0);  // no destructor: the child is left to die_with_parent
  }
  ::close(fds[1]);
  pid_t grandchild = 0;
  ASSERT_EQ(::read(fds[0], &grandchild, sizeof(grandchild)), static_cast<ssize_t>(sizeof(grandchild)));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(middle, &status, 0), middle);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::waitpid(grandchild, &status, 0), grandchild);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

}  // namespace
}  // namespace dpukit
