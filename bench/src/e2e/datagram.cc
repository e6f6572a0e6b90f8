#include "datagram.h"

#include <cstring>
#include <stdexcept>

namespace dpukit::bench::e2e {
namespace {

template <class T>
void put(uint8_t* p, T v) {  // little-endian, whatever the host
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
}
template <class T>
T get(const uint8_t* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= uint64_t{p[i]} << (8 * i);
  return static_cast<T>(v);
}

}  // namespace

const char* program_name(Program p) {
  switch (p) {
    case Program::kFlowTable: return "flowtable";
    case Program::kAppRecog: return "apprecog";
  }
  return "?";
}

Program parse_program(const std::string& s) {
  if (s == "flowtable") return Program::kFlowTable;
  if (s == "apprecog") return Program::kAppRecog;
  throw std::invalid_argument("unknown program '" + s + "' (flowtable or apprecog)");
}

const char* action_name(Action a) {
  switch (a) {
    case Action::kNone: return "none";
    case Action::kHash: return "hash";
    case Action::kCompress: return "compress";
    case Action::kEcho: return "echo";
  }
  return "?";
}

const char* malformed_name(Malformed m) {
  switch (m) {
    case Malformed::kOk: return "ok";
    case Malformed::kShort: return "short";
    case Malformed::kMagic: return "magic";
    case Malformed::kVersion: return "version";
    case Malformed::kLength: return "length";
    case Malformed::kField: return "field";
  }
  return "?";
}

void encode_header(const Header& h, std::span<uint8_t> out) {
  if (out.size() < kHeaderBytes) throw std::invalid_argument("datagram: no room for the header");
  uint8_t* p = out.data();
  put<uint32_t>(p, kMagic);
  p[4] = kDatagramVersion;
  p[5] = static_cast<uint8_t>(h.program);
  p[6] = static_cast<uint8_t>(h.kind);
  p[7] = static_cast<uint8_t>(h.action);
  put<uint64_t>(p + 8, h.seq);
  put<uint64_t>(p + 16, h.send_ns);
  put<uint16_t>(p + 24, h.length);
  std::memcpy(p + 26, h.key.bytes.data(), h.key.bytes.size());
  p[39] = 0;
}

Malformed decode_header(std::span<const uint8_t> bytes, Header& out) {
  if (bytes.size() < kHeaderBytes) return Malformed::kShort;
  const uint8_t* p = bytes.data();
  if (get<uint32_t>(p) != kMagic) return Malformed::kMagic;
  if (p[4] != kDatagramVersion) return Malformed::kVersion;
  const uint16_t length = get<uint16_t>(p + 24);
  if (length != bytes.size()) return Malformed::kLength;
  if (p[5] < 1 || p[5] > 2 || p[6] < 1 || p[6] > 2 || p[7] > 3 || p[39] != 0) return Malformed::kField;
  const auto kind = static_cast<Kind>(p[6]);
  const auto action = static_cast<Action>(p[7]);
  if ((kind == Kind::kRequest) != (action == Action::kNone)) return Malformed::kField;
  out.program = static_cast<Program>(p[5]);
  out.kind = kind;
  out.action = action;
  out.seq = get<uint64_t>(p + 8);
  out.send_ns = get<uint64_t>(p + 16);
  out.length = length;
  std::memcpy(out.key.bytes.data(), p + 26, out.key.bytes.size());
  return Malformed::kOk;
}

}  // namespace dpukit::bench::e2e
