// What the primary reads from a serialized CompactionServiceInput, which
// CompactionServiceJobInfo does not carry: the output level. The format is a
// u32 format version, then RocksDB's option-string format ("name=value;",
// nested structs in {...}, '\' escaping one character).
#pragma once

#include <optional>
#include <string>

namespace dpukit::kv::dcomp {

// The value of the top-level field `name`; nullopt when there is none.
std::optional<std::string> serialized_field(const std::string& input, const std::string& name);

// The "output_level" field as a number; nullopt when it is missing or not a number.
std::optional<int> output_level(const std::string& input);

}  // namespace dpukit::kv::dcomp
