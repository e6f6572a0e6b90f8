// The engines' model, executors and job interface (engine.h). The model's
// arithmetic is checked on virtual clocks, so no figure depends on this
// machine's speed; the executor tests check where a body runs and whose CPU
// it is, and that no completion is handed back early.
#include "dpukit/core/engine.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <stdexcept>
#include <thread>

#include "burn.h"

namespace dpukit {
namespace {

// An engine of our own figures, so the expected times are exact.
EngineSpec byte_spec(double bytes_per_s, unsigned parallel, double latency_ns, unsigned depth = 64) {
  EngineSpec s;
  s.generation = "test";
  s.kind = EngineKind::kRegex;
  s.name = "test RXP";
  s.bytes_per_s = {bytes_per_s, "guess: a test's figure"};
  s.latency_ns = {latency_ns, "guess: a test's figure"};
  s.queue_depth = {double(depth), "guess: a test's figure"};
  s.parallel = {double(parallel), "guess: a test's figure"};
  return s;
}

EngineSpec pka_spec() {
  EngineSpec s;
  s.generation = "test";
  s.kind = EngineKind::kPublicKey;
  s.name = "test PKA";
  s.ops_per_s = {{"rsa2048_sign", {10000, "guess"}}, {"ecdsa_p256_sign", {40000, "guess"}}};
  s.latency_ns = {1000, "guess"};
  s.queue_depth = {16, "guess"};
  s.parallel = {2, "guess"};
  return s;
}

EngineJob bytes_job(uint64_t bytes, uint64_t user = 0) {
  EngineJob j;
  j.bytes = bytes;
  j.body = [] {};
  j.user = user;
  return j;
}

EngineJob op_job(const std::string& op) {
  EngineJob j;
  j.operation = op;
  j.body = [] {};
  return j;
}

// A destructor that hangs fails the test (and ends the run) instead of
// blocking ctest until its timeout.
template <class F>
void within(std::chrono::seconds limit, const char* what, F f) {
  auto done = std::async(std::launch::async, std::move(f));
  if (done.wait_for(limit) == std::future_status::timeout) {
    std::fprintf(stderr, "%s did not return within %lld s\n", what, static_cast<long long>(limit.count()));
    std::abort();
  }
  done.get();
}

// -- the model ----------------------------------------------------------------

TEST(EngineModel, OneUnitServesInTurnAndAddsItsLatency) {
  Engine e(byte_spec(1e9, 1, 500));  // 1 byte per ns
  EXPECT_EQ(e.service_ns(bytes_job(1000)), 1000u);
  EXPECT_EQ(e.schedule(100, bytes_job(1000)), 100u + 1000 + 500);
  // Submitted while the unit serves the first: starts when it is free (1100);
  // the latency does not hold the unit.
  EXPECT_EQ(e.schedule(200, bytes_job(1000)), 1100u + 1000 + 500);
  // After the unit went idle: starts at once.
  EXPECT_EQ(e.schedule(5000, bytes_job(1000)), 5000u + 1000 + 500);
  EXPECT_EQ(e.schedule(5000, bytes_job(0)), 6000u + 0 + 500);
  Engine::Stats s = e.stats();
  EXPECT_EQ(s.jobs, 4u);
  EXPECT_EQ(s.bytes, 3000u);
  EXPECT_EQ(s.busy_ns, 3000u);
}

TEST(EngineModel, UnitsEachRunAtTheirShareOfTheRate) {
  Engine e(byte_spec(4e9, 4, 250));  // 4 units of 1 byte per ns
  EXPECT_EQ(e.service_ns(bytes_job(1000)), 1000u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(e.schedule(0, bytes_job(1000)), 1250u) << "job " << i;
  // The fifth waits for a unit (all free at 1000), and so does the sixth.
  EXPECT_EQ(e.schedule(0, bytes_job(1000)), 2250u);
  EXPECT_EQ(e.schedule(10, bytes_job(3000)), 4250u);
  // Units free at 2000, 4000, 1000, 1000: the next starts when submitted.
  EXPECT_EQ(e.schedule(1500, bytes_job(1000)), 2750u);
  EXPECT_EQ(e.stats().busy_ns, 9000u);
}

TEST(EngineModel, AUnitKeepsTheFractionsOfANanosecond) {
  // 1000 bytes at 3 bytes per ns: 333.33 ns each. Rounding each job's
  // service would drift by 1000 ns over 3000 jobs (0.1 %); the unit carries
  // the fraction, so the 3000th completes at 1,000,000 ns exactly.
  Engine e(byte_spec(3e9, 1, 0));
  EXPECT_EQ(e.service_ns(bytes_job(1000)), 333u);
  uint64_t last = 0;
  for (int k = 1; k <= 3000; ++k) {
    last = e.schedule(0, bytes_job(1000));
    const double exact = k * 1000.0 / 3.0;
    ASSERT_GE(double(last), exact - 1e-6) << "job " << k << " completes before its modelled time";
    ASSERT_LT(double(last), exact + 1.0 + 1e-6) << "job " << k;
  }
  EXPECT_GE(last, 999'999u);
  EXPECT_LE(last, 1'000'001u);
  EXPECT_EQ(e.stats().busy_ns, 1'000'000u);
}

TEST(EngineModel, APkaOperationCostsItsShareOfTheOperationRate) {
  Engine e(pka_spec());  // 2 units; rsa2048_sign 10,000/s in all: 200 us per unit
  EXPECT_EQ(e.service_ns(op_job("rsa2048_sign")), 200'000u);
  EXPECT_EQ(e.service_ns(op_job("ecdsa_p256_sign")), 50'000u);
  EXPECT_EQ(e.schedule(0, op_job("rsa2048_sign")), 201'000u);
  EXPECT_EQ(e.schedule(0, op_job("rsa2048_sign")), 201'000u);
  EXPECT_EQ(e.schedule(0, op_job("ecdsa_p256_sign")), 200'000u + 50'000 + 1000);
  EXPECT_EQ(e.stats().jobs, 3u);
}

TEST(EngineModel, RefusesWhatTheEngineDoesNotDo) {
  Engine pka(pka_spec());
  try {
    pka.schedule(0, op_job("rsa4096_sign"));
    FAIL() << "an operation the PKA's spec does not list was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rsa4096_sign"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rsa2048_sign"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ecdsa_p256_sign"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pka.schedule(0, bytes_job(64)), std::invalid_argument);  // a byte job on the PKA
  EXPECT_THROW(pka.schedule(0, op_job("")), std::invalid_argument);     // no operation
  Engine rxp(byte_spec(1e9, 1, 0));
  EXPECT_THROW(rxp.schedule(0, op_job("rsa2048_sign")), std::invalid_argument);
  EXPECT_THROW(rxp.service_ns(op_job("rsa2048_sign")), std::invalid_argument);
  // A refused job reserves nothing.
  EXPECT_EQ(pka.stats().jobs, 0u);
  EXPECT_EQ(rxp.stats().jobs, 0u);
  EXPECT_EQ(rxp.schedule(7, bytes_job(10)), 17u);
  // Through the queue: refused before it takes a task.
  EngineQueue q(pka, 1, EngineQueue::Clock::kVirtual);
  EXPECT_THROW(q.submit(op_job("dsa1024_sign"), 0), std::invalid_argument);
  EXPECT_EQ(q.in_flight(), 0u);
  EngineJob no_body;
  no_body.operation = "rsa2048_sign";
  EXPECT_THROW(q.submit(no_body, 0), std::invalid_argument);
  EXPECT_TRUE(q.submit(op_job("rsa2048_sign"), 0));
}

TEST(EngineModel, RefusesASpecItCannotModel) {
  EXPECT_THROW(Engine(byte_spec(1e9, 1, 0), 0), std::invalid_argument);  // no executor
  EXPECT_THROW(Engine(byte_spec(0, 1, 0)), std::invalid_argument);
  EXPECT_THROW(Engine(byte_spec(1e9, 0, 0)), std::invalid_argument);
  EXPECT_THROW(Engine(byte_spec(1e9, 1, -5)), std::invalid_argument);
  EXPECT_THROW(Engine(byte_spec(1e9, 1, 0, 0)), std::invalid_argument);
  EngineSpec s = byte_spec(1e9, 1, 0);
  s.parallel.value = 1.5;
  EXPECT_THROW(Engine{s}, std::invalid_argument);
  EngineSpec p = pka_spec();
  p.ops_per_s.clear();
  EXPECT_THROW(Engine{p}, std::invalid_argument);
}

// A closed loop on a virtual clock: `depth` jobs in flight, each resubmitted
// when one completes; the clock jumps to the next completion and waits for
// the executor to compute it (no model time passes meanwhile). Returns the
// rate in bytes per second between the `warm`-th and the last completion.
double closed_loop_rate(Engine& e, unsigned depth, uint64_t bytes, int jobs, int warm) {
  EngineQueue q(e, depth, EngineQueue::Clock::kVirtual);
  uint64_t now = 0;
  int submitted = 0, done = 0;
  uint64_t t_warm = 0, t_last = 0;
  std::vector<EngineCompletion> out;
  while (done < jobs) {
    while (submitted < jobs && q.submit(bytes_job(bytes, submitted), now)) ++submitted;
    now = std::max(now, *q.next_completion_ns());
    q.wait_computed();
    out.clear();
    q.progress(now, out);
    for (const auto& c : out) {
      EXPECT_LE(c.completed_ns, now);
      ++done;
      if (done == warm) t_warm = c.completed_ns;
      t_last = c.completed_ns;
    }
  }
  return double(jobs - warm) * double(bytes) * 1e9 / double(t_last - t_warm);
}

// Little's law: below saturation the rate is depth / (service + latency) jobs
// per ns; at and beyond it, the engine's bytes_per_s. With no latency the
// engine saturates at depth = parallel; with one, the units idle during it
// unless depth >= parallel x (service + latency) / service.
TEST(EngineModel, SaturatesAtTheSpecsRateAndFollowsLittlesLawBelow) {
  const double rate = 4e9;
  const unsigned parallel = 4;
  const uint64_t bytes = 1000;  // 1000 ns per job on one unit
  {
    Engine e(byte_spec(rate, parallel, 0));
    EXPECT_NEAR(closed_loop_rate(e, 1, bytes, 400, 100), 1e9, 1e9 * 1e-9);
    EXPECT_NEAR(closed_loop_rate(e, 2, bytes, 400, 100), 2e9, 2e9 * 1e-9);
    EXPECT_NEAR(closed_loop_rate(e, 4, bytes, 400, 100), rate, rate * 1e-9);
    EXPECT_NEAR(closed_loop_rate(e, 16, bytes, 400, 100), rate, rate * 1e-9);
  }
  {
    Engine e(byte_spec(rate, parallel, 1000));  // latency = service
    for (unsigned depth : {1u, 2u, 4u, 6u}) {
      const double expect = depth * double(bytes) / 2000.0 * 1e9;
      EXPECT_NEAR(closed_loop_rate(e, depth, bytes, 400, 100), expect, expect * 1e-9) << "depth " << depth;
    }
    EXPECT_NEAR(closed_loop_rate(e, 8, bytes, 400, 100), rate, rate * 1e-9);
    EXPECT_NEAR(closed_loop_rate(e, 32, bytes, 400, 100), rate, rate * 1e-9);
  }
}

// -- the job interface --------------------------------------------------------

TEST(EngineQueue, RefusesWhenItsDepthIsInFlight) {
  Engine e(byte_spec(1e9, 1, 0, 3));
  EngineQueue q(e, 0, EngineQueue::Clock::kVirtual);  // the spec's depth
  EXPECT_EQ(q.depth(), 3u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_TRUE(q.submit(bytes_job(100, i), 0));
  EXPECT_FALSE(q.submit(bytes_job(100, 3), 0));
  EXPECT_EQ(q.in_flight(), 3u);
  EXPECT_EQ(e.stats().jobs, 3u);  // the refused one reserved no unit
  EXPECT_EQ(q.next_completion_ns(), 100u);
  std::vector<EngineCompletion> out;
  q.wait_computed();
  EXPECT_EQ(q.progress(100, out), 1u);
  EXPECT_EQ(out[0].user, 0u);
  EXPECT_TRUE(q.submit(bytes_job(100, 3), 100));
  EXPECT_FALSE(q.submit(bytes_job(100, 4), 100));
  // A queue of its own depth on the same engine.
  EngineQueue q2(e, 1, EngineQueue::Clock::kVirtual);
  EXPECT_TRUE(q2.submit(bytes_job(100), 100));
  EXPECT_FALSE(q2.submit(bytes_job(100), 100));
}

TEST(EngineQueue, HandsBackInOrderOfCompletionAtTheirTime) {
  Engine e(byte_spec(2e9, 2, 10));  // 2 units of 1 byte per ns
  EngineQueue q(e, 8, EngineQueue::Clock::kVirtual);
  ASSERT_TRUE(q.submit(bytes_job(5000, 1), 0));  // 5010
  ASSERT_TRUE(q.submit(bytes_job(1000, 2), 0));  // 1010
  ASSERT_TRUE(q.submit(bytes_job(1000, 3), 0));  // 2010 (second unit after job 2)
  ASSERT_TRUE(q.submit(bytes_job(10, 4), 0));    // 2020
  EXPECT_EQ(q.next_completion_ns(), 1010u);
  std::vector<EngineCompletion> out;
  // Let every body run, then nothing is handed back before its time.
  for (int i = 0; i < 4; ++i) {
    q.wait_computed();
    if (i < 3) {
      std::vector<EngineCompletion> none;
      EXPECT_EQ(q.progress(*q.next_completion_ns() - 1, none), 0u);
      EXPECT_EQ(q.progress(*q.next_completion_ns(), out), 1u);
    }
  }
  EXPECT_EQ(q.progress(5009, out), 0u);
  EXPECT_EQ(q.progress(5010, out), 1u);
  ASSERT_EQ(out.size(), 4u);
  const uint64_t users[] = {2, 3, 4, 1}, times[] = {1010, 2010, 2020, 5010};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out[i].user, users[i]);
    EXPECT_EQ(out[i].completed_ns, times[i]);
    EXPECT_EQ(out[i].submitted_ns, 0u);
    EXPECT_FALSE(out[i].error);
  }
  EXPECT_EQ(q.in_flight(), 0u);
  EXPECT_FALSE(q.next_completion_ns().has_value());
  q.wait_computed();  // nothing in flight: returns at once
}

TEST(EngineQueue, NothingIsHandedBackBeforeItsBodyRan) {
  Engine e(byte_spec(1e9, 1, 0));
  EngineQueue q(e, 4, EngineQueue::Clock::kVirtual);
  std::latch open(1);
  std::atomic<bool> ran{false};
  EngineJob j = bytes_job(100, 7);
  j.body = [&] {
    open.wait();
    ran = true;
  };
  ASSERT_TRUE(q.submit(std::move(j), 0));
  ASSERT_TRUE(q.submit(bytes_job(100, 8), 0));  // behind it on the executor, completes at 200
  std::vector<EngineCompletion> out;
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(q.progress(1'000'000, out), 0u) << "handed back while its body is blocked";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(q.in_flight(), 2u);
  // wait_computed blocks until the body ran.
  auto waiter = std::async(std::launch::async, [&] { q.wait_computed(); });
  EXPECT_EQ(waiter.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  open.count_down();
  waiter.get();
  EXPECT_TRUE(ran);
  EXPECT_EQ(q.progress(99, out), 0u);  // computed, but not due
  EXPECT_EQ(q.progress(100, out), 1u);
  EXPECT_EQ(out[0].user, 7u);
  q.wait_computed();
  EXPECT_EQ(q.progress(1'000'000, out), 1u);
  EXPECT_EQ(e.stats().late_jobs, 0u);  // a virtual clock is never late
}

TEST(EngineQueue, ADueJobStillComputingDoesNotHoldBackTheOthers) {
  Engine e(byte_spec(2e9, 2, 0), 2);  // two executors
  EngineQueue q(e, 4, EngineQueue::Clock::kVirtual);
  std::latch open(1);
  EngineJob slow = bytes_job(100, 1);
  slow.body = [&] { open.wait(); };
  ASSERT_TRUE(q.submit(std::move(slow), 0));     // due at 100
  ASSERT_TRUE(q.submit(bytes_job(200, 2), 0));   // due at 200, computed by the other executor
  std::vector<EngineCompletion> out;
  for (int i = 0; i < 5000 && out.empty(); ++i) {
    q.progress(1000, out);
    if (out.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].user, 2u);
  EXPECT_EQ(q.next_completion_ns(), 100u);
  open.count_down();
  q.wait_computed();
  EXPECT_EQ(q.progress(1000, out), 1u);
  EXPECT_EQ(out[1].user, 1u);
}

TEST(EngineQueue, ARealClockGetsNoCompletionBeforeItsModelledTime) {
  // 1,000 bytes per second: a 100-byte job is served for 100 ms.
  Engine e(byte_spec(1000, 1, 0));
  EngineQueue q(e, 4);  // Clock::kReal
  const uint64_t t0 = now_ns();
  ASSERT_TRUE(q.submit(bytes_job(100, 1), t0));
  const uint64_t due = *q.next_completion_ns();
  EXPECT_EQ(due, t0 + 100'000'000);
  std::vector<EngineCompletion> out;
  uint64_t got_at = 0;
  while (out.empty()) {
    const uint64_t now = now_ns();
    if (q.progress(now, out) == 1) got_at = now;
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  EXPECT_GE(got_at, due);
  EXPECT_EQ(out[0].completed_ns, due);
  EXPECT_EQ(e.stats().late_jobs, 0u);  // a trivial body, computed well within 100 ms
}

TEST(EngineQueue, ARealClockCountsABodyThatFinishedAfterItsTimeAsLate) {
  Engine e(byte_spec(1e9, 1, 0));
  EngineQueue q(e, 4);  // Clock::kReal
  std::latch open(1);
  EngineJob j = bytes_job(100, 1);  // due 100 ns after submission
  j.body = [&] { open.wait(); };
  const uint64_t t0 = now_ns();
  ASSERT_TRUE(q.submit(std::move(j), t0));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::vector<EngineCompletion> out;
  EXPECT_EQ(q.progress(now_ns(), out), 0u);  // due, not computed
  open.count_down();
  q.wait_computed();
  EXPECT_EQ(q.progress(now_ns(), out), 1u);
  EXPECT_EQ(out[0].completed_ns, t0 + 100);  // as modelled, though handed back later
  EXPECT_EQ(e.stats().late_jobs, 1u);
  // The same on a virtual clock is not late.
  EngineQueue v(e, 4, EngineQueue::Clock::kVirtual);
  std::latch open2(1);
  EngineJob j2 = bytes_job(100, 2);
  j2.body = [&] { open2.wait(); };
  ASSERT_TRUE(v.submit(std::move(j2), now_ns()));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  open2.count_down();
  v.wait_computed();
  EXPECT_EQ(e.stats().late_jobs, 1u);
}

// -- the executors --------------------------------------------------------------

TEST(EngineExecutor, BodiesRunOnTheHwPlacesThreadAndItsCpuIsHw) {
  Engine e(byte_spec(1e12, 1, 0));
  EngineQueue q(e, 4, EngineQueue::Clock::kVirtual);
  std::thread::id ran_on;
  uint64_t burned = 0;
  EngineJob j = bytes_job(1000, 1);
  j.body = [&] {
    ran_on = std::this_thread::get_id();
    burned = test::burn(60'000'000);  // 60 ms of CPU
  };
  const uint64_t cpu0 = thread_cpu_ns();
  ASSERT_TRUE(q.submit(std::move(j), 0));
  q.wait_computed();  // sleeps on a condition variable: no CPU
  std::vector<EngineCompletion> out;
  ASSERT_EQ(q.progress(UINT64_MAX, out), 1u);
  const uint64_t caller_cpu = thread_cpu_ns() - cpu0;
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_NE(ran_on, std::thread::id());
  EXPECT_GE(e.stats().hw_cpu_ns, burned);
  EXPECT_GE(burned, 60'000'000u);
  EXPECT_LT(caller_cpu, 20'000'000u) << "the body's CPU was the caller's";
}

TEST(EngineExecutor, SeveralExecutorsRunBodiesAtOnce) {
  Engine e(byte_spec(1e12, 2, 0), 2);
  EngineQueue q(e, 4, EngineQueue::Clock::kVirtual);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // both executors asleep
  // Each body waits for the other to have started: done only if two run at once.
  std::latch both(2);
  std::thread::id ids[2];
  for (int i = 0; i < 2; ++i) {
    EngineJob j = bytes_job(10, i);
    j.body = [&, i] {
      ids[i] = std::this_thread::get_id();
      both.arrive_and_wait();
    };
    ASSERT_TRUE(q.submit(std::move(j), 0));
  }
  std::vector<EngineCompletion> out;
  // On a virtual clock the wait wakes one executor, which wakes the other.
  within(std::chrono::seconds(60), "two bodies that wait for each other", [&] {
    while (out.size() < 2) {
      q.wait_computed();
      q.progress(UINT64_MAX, out);
    }
  });
  EXPECT_NE(ids[0], ids[1]);
}

TEST(EngineExecutor, ExecutorsArePinnedToTheHwCpus) {
  const CpuSet avail = available_cpus();
  ASSERT_FALSE(avail.empty());
  const CpuSet hw{{avail.cpus.back()}};
  Engine e(byte_spec(1e12, 1, 0), 1, hw);
  EngineQueue q(e, 1, EngineQueue::Clock::kVirtual);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  char name[16] = {};
  EngineJob j = bytes_job(1);
  j.body = [&] {
    pthread_getaffinity_np(pthread_self(), sizeof mask, &mask);
    pthread_getname_np(pthread_self(), name, sizeof name);
  };
  ASSERT_TRUE(q.submit(std::move(j), 0));
  q.wait_computed();
  EXPECT_EQ(CPU_COUNT(&mask), 1);
  EXPECT_TRUE(CPU_ISSET(hw.cpus[0], &mask));
  EXPECT_STREQ(name, "hw:regex");
}

TEST(EngineExecutor, ABodysExceptionComesBackWithItsCompletion) {
  Engine e(byte_spec(1e9, 1, 0));
  EngineQueue q(e, 4, EngineQueue::Clock::kVirtual);
  EngineJob bad = bytes_job(10, 1);
  bad.body = [] { throw std::runtime_error("inflate: invalid block type"); };
  int ran = 0;
  EngineJob good = bytes_job(10, 2);
  good.body = [&] { ++ran; };
  ASSERT_TRUE(q.submit(std::move(bad), 0));
  ASSERT_TRUE(q.submit(std::move(good), 0));
  std::vector<EngineCompletion> out;
  while (out.size() < 2) {
    q.wait_computed();
    q.progress(UINT64_MAX, out);
  }
  ASSERT_TRUE(out[0].error);
  EXPECT_EQ(out[0].user, 1u);
  try {
    std::rethrow_exception(out[0].error);
  } catch (const std::runtime_error& x) {
    EXPECT_STREQ(x.what(), "inflate: invalid block type");
  }
  EXPECT_FALSE(out[1].error);  // the executor went on
  EXPECT_EQ(ran, 1);
  // The task is reused clean: no stale error on the next job through it.
  ASSERT_TRUE(q.submit(bytes_job(10, 3), 20));
  q.wait_computed();
  out.clear();
  ASSERT_EQ(q.progress(UINT64_MAX, out), 1u);
  EXPECT_FALSE(out[0].error);
}

TEST(EngineExecutor, ARealClocksSubmitWakesASleepingExecutorAndNotAPollingOne) {
  std::vector<EngineCompletion> out;
  auto one_job_after_a_pause = [&](Engine& e, EngineQueue& q) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the executor has gone idle
    const uint64_t before = e.stats().wakeups;
    EXPECT_TRUE(q.submit(bytes_job(10), now_ns()));
    const uint64_t woke = e.stats().wakeups - before;
    q.wait_computed();
    while (q.progress(now_ns(), out) == 0) {
    }
    return woke;
  };
  {
    Engine sleeper(byte_spec(1e9, 1, 0));  // sleeps at once
    EngineQueue q(sleeper, 4);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(one_job_after_a_pause(sleeper, q), 1u) << "round " << i;
  }
  {
    // Polls for 10 s before it sleeps: a submit 5 ms after the last job finds it polling.
    Engine poller(byte_spec(1e9, 1, 0), 1, {}, 10'000'000'000);
    EngineQueue q(poller, 4);
    one_job_after_a_pause(poller, q);  // the first may find it not yet started
    for (int i = 0; i < 3; ++i) EXPECT_EQ(one_job_after_a_pause(poller, q), 0u) << "round " << i;
    // Its polling is not hw work: a trivial body costs far less than the 15 ms it polled.
    EXPECT_LT(poller.stats().hw_cpu_ns, 5'000'000u);
  }  // and it stops at once, polling or not
}

TEST(EngineExecutor, AVirtualClocksSubmitLeavesTheWakeUpToTheWait) {
  Engine e(byte_spec(1e9, 1, 0));
  EngineQueue q(e, 4, EngineQueue::Clock::kVirtual);
  std::atomic<bool> ran{false};
  EngineJob j = bytes_job(10, 1);
  j.body = [&] { ran = true; };
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the executor sleeps
  const uint64_t w0 = e.stats().wakeups;
  ASSERT_TRUE(q.submit(std::move(j), 0));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(e.stats().wakeups, w0);  // the submit paid no wake-up...
  EXPECT_FALSE(ran);                 // ...so nothing computed it yet
  q.wait_computed();                 // the wait wakes it
  EXPECT_TRUE(ran);
  EXPECT_EQ(e.stats().wakeups, w0 + 1);
  std::vector<EngineCompletion> out;
  EXPECT_EQ(q.progress(10, out), 1u);
  // A caller that only polls progress() still gets its job: a due job not
  // computed wakes the executor.
  ran = false;
  EngineJob k = bytes_job(10, 2);
  k.body = [&] { ran = true; };
  ASSERT_TRUE(q.submit(std::move(k), 10));
  within(std::chrono::seconds(60), "polling a virtual clock's queue", [&] {
    while (q.progress(20, out) == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  });
  EXPECT_TRUE(ran);
  EXPECT_EQ(out.back().user, 2u);
  EXPECT_EQ(e.stats().wakeups, w0 + 2);
}

TEST(EngineExecutor, DestructionWithJobsInFlightWaitsForTheirBodiesAndDoesNotHang) {
  std::atomic<int> ran{0};
  within(std::chrono::seconds(60), "destroying an engine with jobs in flight", [&] {
    auto e = std::make_unique<Engine>(byte_spec(1e9, 2, 0));
    {
      std::vector<int> results(16, 0);  // the caller's memory the bodies write
      EngineQueue q(*e, 16, EngineQueue::Clock::kReal);
      for (int i = 0; i < 16; ++i) {
        EngineJob j = bytes_job(1000, i);
        j.body = [&, i] {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          results[i] = i + 1;
          ++ran;
        };
        ASSERT_TRUE(q.submit(std::move(j), now_ns()));
      }
      // q goes first (declared last): it must wait for the bodies, which write `results`.
    }
    EXPECT_EQ(ran.load(), 16);
    e.reset();
  });
  // An engine with nothing to do stops at once, and so does one whose queue
  // was never used.
  within(std::chrono::seconds(60), "destroying an idle engine", [] {
    Engine e(byte_spec(1e9, 1, 0), 3);
    EngineQueue q(e, 4);
  });
}

}  // namespace
}  // namespace dpukit
