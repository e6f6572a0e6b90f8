// The datagrams of DPUBench's end-to-end programs (§5, Fig. 13): what the
// client sends and what the server answers, over UDP.
//
// Every datagram starts with a 40-byte header, all integers little-endian:
//   off  size  field
//     0     4  magic 0x32455044 ("DPE2" as bytes)
//     4     1  format version (kDatagramVersion)
//     5     1  program: 1 flowtable, 2 apprecog
//     6     1  kind: 1 request (client -> server), 2 reply (server -> client)
//     7     1  action: 0 in a request; in a reply what the server did
//                (1 hash, 2 compress, 3 echo)
//     8     8  sequence number (the client's, copied into the reply)
//    16     8  send time, CLOCK_MONOTONIC ns of the client (copied into the reply)
//    24     2  length of the whole datagram in bytes (a truncated one is caught)
//    26    13  flow key: the synthetic 5-tuple (FlowKey bytes, network order)
//    39     1  reserved, 0
//    40        body: the application payload (request) or the result (reply)
// The synthetic 5-tuple stands for the packet's IP/UDP headers: one client
// socket then carries many flows, as pktgen's random flows do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "dpukit/bench_e2e.h"  // Program
#include "dpukit/core/flow_key.h"

namespace dpukit::bench::e2e {

inline constexpr uint32_t kMagic = 0x32455044;
inline constexpr uint8_t kDatagramVersion = 1;
inline constexpr size_t kHeaderBytes = 40;
// Largest request: its reply (a deflate stream of the body can be a few
// bytes longer than the body) still fits a 1500-byte MTU unfragmented.
inline constexpr size_t kMaxDatagram = 1400;
// Receive buffers: anything longer than this is reported truncated by the kernel.
inline constexpr size_t kRecvBuffer = 2048;

enum class Kind : uint8_t { kRequest = 1, kReply = 2 };
// What the application-recognition server did with a request.
enum class Action : uint8_t { kNone = 0, kHash = 1, kCompress = 2, kEcho = 3 };

const char* action_name(Action a);    // "none", "hash", "compress", "echo"

struct Header {
  Program program = Program::kFlowTable;
  Kind kind = Kind::kRequest;
  Action action = Action::kNone;
  uint64_t seq = 0;
  uint64_t send_ns = 0;
  uint16_t length = 0;  // of the whole datagram
  FlowKey key;
};

// Why a datagram was refused; kOk when it was not.
enum class Malformed : uint8_t { kOk, kShort, kMagic, kVersion, kLength, kField };
inline constexpr size_t kMalformedKinds = 6;
const char* malformed_name(Malformed m);  // "ok", "short", "magic", "version", "length", "field"

// Writes `h` into the first kHeaderBytes of `out` (which must hold them).
void encode_header(const Header& h, std::span<uint8_t> out);
// Reads and checks the header of a received datagram of `bytes.size()`
// bytes: refused when shorter than the header, with another magic or
// version, when the length field differs from the size received, or when a
// field holds a value no sender writes.
Malformed decode_header(std::span<const uint8_t> bytes, Header& out);

}  // namespace dpukit::bench::e2e
