#include "dpukit/core/accounting.h"
#include "burn.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "dpukit/core/cli.h"

namespace dpukit {
namespace {

using test::burn;

TEST(Accounting, ThreadTimeGoesToItsPlaceOnly) {
  CpuAccount acct;
  std::thread dpu([&] {
    PlaceTimer t(acct, Place::kDpu);
    burn(30'000'000);
  });
  dpu.join();
  {
    PlaceTimer t(acct, Place::kHw);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // sleeping costs no CPU
  }
  EXPECT_GE(acct.get(Place::kDpu), 30'000'000u);
  EXPECT_LT(acct.get(Place::kDpu), 200'000'000u);
  EXPECT_LT(acct.get(Place::kHw), 10'000'000u);
  EXPECT_EQ(acct.get(Place::kHost), 0u);
}

TEST(Accounting, FinishAddsOnce) {
  CpuAccount acct;
  PlaceTimer t(acct, Place::kHost);
  burn(5'000'000);
  uint64_t a = t.finish();
  EXPECT_EQ(t.finish(), 0u);
  EXPECT_EQ(acct.get(Place::kHost), a);
}

TEST(Accounting, ChildProcessTimeFromRusage) {
  pid_t c = fork();
  if (c == 0) {
    burn(40'000'000);
    _exit(0);
  }
  int st;
  rusage ru{};
  ASSERT_EQ(wait4(c, &st, 0, &ru), c);
  EXPECT_GE(rusage_cpu_ns(ru), 30'000'000u);  // rusage ticks are coarser than the thread clock
}

TEST(Accounting, OtherThreadAndProcessClocks) {
  std::atomic<bool> stop{false};
  std::thread t([&] { while (!stop) {} });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_GT(thread_cpu_ns(t.native_handle()), 1'000'000u);
  EXPECT_GE(process_cpu_ns(), thread_cpu_ns(t.native_handle()));
  EXPECT_GT(process_cpu_ns(getpid()), 0u);
  stop = true;
  t.join();
}

TEST(CpuSet, ParsesAndPrintsLinuxLists) {
  EXPECT_EQ(CpuSet::parse("0-3,6").cpus, (std::vector<int>{0, 1, 2, 3, 6}));
  EXPECT_EQ(CpuSet::parse("5,1,1").str(), "1,5");
  EXPECT_EQ(CpuSet::parse("0-2,4-5").str(), "0-2,4-5");
  for (const char* bad : {"", "a", "3-1", "1,", "1;2", "-1", "99999"})
    EXPECT_THROW(CpuSet::parse(bad), std::invalid_argument) << bad;
}

TEST(Placement, DegradesGracefullyOnAFewCores) {
  CpuSet avail = available_cpus();
  ASSERT_FALSE(avail.empty());
  Placement p = Placement::plan("", "");
  EXPECT_FALSE(p.host.empty());
  EXPECT_FALSE(p.dpu.empty());
  if (avail.cpus.size() >= 2) {
    EXPECT_NE(p.host.cpus, p.dpu.cpus) << "separate CPUs when there are two";
  }
  Placement q = Placement::plan("0", "4000");
  EXPECT_NE(q.note.find("4000"), std::string::npos) << "a CPU that does not exist is named in the note";
  EXPECT_FALSE(q.dpu.empty()) << "and the dpu side falls back to CPUs that exist";
  EXPECT_NE(pin_current_thread(CpuSet{{4000}}), "");
  EXPECT_EQ(pin_current_thread(CpuSet{{avail.cpus.front()}}), "");
  EXPECT_EQ(pin_current_thread(avail), "");
}

TEST(Cli, ParsesSizes) {
  EXPECT_EQ(parse_bytes("4096"), 4096u);
  EXPECT_EQ(parse_bytes("64K"), 65536u);
  EXPECT_EQ(parse_bytes("500KB"), 512000u);
  EXPECT_EQ(parse_bytes("32MB"), 32u << 20);
  EXPECT_EQ(parse_bytes("1GiB"), 1u << 30);
  EXPECT_EQ(parse_bytes("1.5K"), 1536u);
  for (const char* bad : {"", "x", "12Q", "-5", "0.3"}) EXPECT_THROW(parse_bytes(bad), std::invalid_argument) << bad;
}

}  // namespace
}  // namespace dpukit
