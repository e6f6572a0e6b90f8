#include "dpukit/core/pacing.h"

#include <gtest/gtest.h>

#include <thread>

#include "dpukit/core/accounting.h"

namespace dpukit {
namespace {

TEST(Pacer, ReleasesAtTheOfferedRateOnItsClock) {
  // Driven by explicit time: 1 M/s for 10 ms is 10,000 items, within one burst.
  Pacer p(1e6, 32);
  uint64_t t = now_ns() + 1'000'000;
  uint64_t released = 0;
  for (uint64_t step = 0; step < 10'000; ++step) released += p.try_acquire(1000, t + step * 1000);
  EXPECT_NEAR(static_cast<double>(released), 10'000.0, 40.0);
}

TEST(Pacer, NeverReleasesMoreThanOneBurstAfterAStall) {
  Pacer p(1e6, 16);
  uint64_t t = now_ns();
  EXPECT_LE(p.try_acquire(1000, t + 50'000'000), 16u) << "50 ms of credit must not come out at once";
  EXPECT_LE(p.try_acquire(1000, t + 50'000'000), 0u);
  EXPECT_EQ(p.try_acquire(1000, t + 50'001'000), 1u);
}

TEST(Pacer, AcquireWaitsInRealTime) {
  Pacer p(200'000, 8);
  uint64_t t0 = now_ns();
  uint64_t n = 0;
  while (n < 20'000) n += p.acquire(8);  // 0.1 s of work at 200 k/s
  double secs = (now_ns() - t0) / 1e9;
  EXPECT_GT(secs, 0.095);
  EXPECT_LT(secs, 0.5);
}

// A sender reads the clock once a burst: acquire() says when it released.
TEST(Pacer, AcquireSaysWhenItReleased) {
  for (double rate : {0.0, 1e6}) {
    Pacer p(rate, 8);
    uint64_t last = now_ns(), now = 0;
    for (int i = 0; i < 100; ++i) {
      ASSERT_GT(p.acquire(8, now), 0u);
      EXPECT_GE(now, last) << "rate " << rate;
      last = now;
      EXPECT_LE(now, now_ns());
    }
  }
}

TEST(Pacer, UnpacedReleasesEverything) {
  Pacer p(0);
  EXPECT_EQ(p.acquire(1000), 1000u);
  EXPECT_EQ(p.released(), 1000u);
}

}  // namespace
}  // namespace dpukit
