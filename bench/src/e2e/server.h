// The end-to-end server (DPUBench §5, Fig. 13): receives the client's UDP
// datagrams in recvmmsg batches and runs one of the two programs on them.
//
// Threads, each pinned to its place's CPUs and each with its CPU time
// counted for that place only (core's PlaceTimer):
//   flowtable, table sw:   one thread on `place` receives and counts.
//   flowtable, table hw:   a NIC thread (place hw) receives, looks every
//                          packet up in the emulated flow table and counts
//                          hits there; misses go through an SPSC hand-off to
//                          the software path on `place` (MissPath).
//   apprecog, place host:  one thread on the host receives, recognizes,
//                          acts and replies.
//   apprecog, place dpu:   dpu_work "recognition" (default, the paper's
//                          split): a dpu thread receives into a buffer pool
//                          and runs rxp_match; descriptors go through an
//                          SPSC hand-off to a host thread that hashes,
//                          compresses or echoes and sends the reply; the
//                          buffers come back on a second hand-off.
//                          dpu_work "all": one dpu thread does everything.
//   apprecog, place dpu, engines (--engine regex[,compress]): as the split,
//                          but the dpu thread posts each request's matching
//                          as a job to the RXP and, where the card compresses,
//                          the compress action to the deflate engine
//                          (EngineOffload); it polls the completions and hands
//                          the classified requests (and the engine's deflate
//                          streams) to the host thread. The jobs are computed
//                          by the libraries on the engines' executor threads
//                          (hw) and complete at the model's time.
// Every thread on the dpu place is time-dilated to `dpu_speed` (core's
// Dilation): it pays after each received batch (or popped group of misses),
// before it replies or hands the packets on, so its service time is that of
// a core F as fast. The host place and the NIC thread (hw) never dilate.
// The receiving thread blocks in recvmmsg (MSG_WAITFORONE) so that an idle
// server uses no CPU: utilization is CPU time / active wall time, where the
// active window runs from the first datagram received to the last.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpukit/bench_e2e.h"
#include "dpukit/core/accounting.h"
#include "datagram.h"
#include "udp.h"

namespace dpukit::bench::e2e {

class AppRecognizer;
class EngineOffload;

// The Server of dpukit/bench_e2e.h.
struct Server::Impl {
  explicit Impl(ServerConfig config);
  ~Impl();

  sockaddr_in local() const { return socket_.local(); }
  nlohmann::json run(const std::atomic<bool>& stop, CpuAccount& cpu);
  nlohmann::json parameters() const;

  struct Shared;
  nlohmann::json run_flowtable_sw(Shared& s, CpuAccount& cpu);
  nlohmann::json run_flowtable_hw(Shared& s, CpuAccount& cpu);
  nlohmann::json run_apprecog_single(Shared& s, CpuAccount& cpu, Place place);
  nlohmann::json run_apprecog_split(Shared& s, CpuAccount& cpu);
  // run_apprecog_split's steps (server.cc).
  struct SplitRing;
  struct EngineDpu;
  void split_dpu_recognize(Shared& s, CpuAccount& cpu, SplitRing& ring);
  void split_host_act(Shared& s, CpuAccount& cpu, SplitRing& ring);

  ServerConfig config_;
  UdpSocket socket_;
  size_t rcvbuf_ = 0;
  std::vector<std::unique_ptr<AppRecognizer>> recognizers_;  // one per thread that uses one
  std::unique_ptr<EngineOffload> engines_;                   // --engine: the card's engines
};

}  // namespace dpukit::bench::e2e
