// Envoy's xDS messages without generated code: a protobuf DescriptorPool
// over the FileDescriptorSet that mesh/xds.cmake writes from the pinned
// go-control-plane envoy module, and protobuf's own JSON <-> binary
// conversion over it. Resources in a google.protobuf.Any come out with their
// "@type", in proto-JSON with Envoy's snake_case field names.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace grpc {
class ByteBuffer;
}

namespace dpukit::mesh::xds {

// A message's bytes as gRPC carries them, and back (include
// <grpcpp/support/byte_buffer.h> to call them).
grpc::ByteBuffer to_byte_buffer(const std::string& bytes);
std::string from_byte_buffer(const grpc::ByteBuffer& buffer);

// A length-delimited field (a message, bytes, a string) in protobuf's wire
// form: appended to a message's bytes, it sets (or, repeated, adds) the field.
std::string length_delimited(int number, std::string_view bytes);

// The embedded FileDescriptorSet (binary).
std::string_view descriptor_set();

class Messages {
 public:
  // Builds the pool; throws std::runtime_error when the set does not load.
  Messages();
  ~Messages();
  Messages(const Messages&) = delete;
  Messages& operator=(const Messages&) = delete;

  // `type` is a full message name ("envoy.service.discovery.v3.DiscoveryResponse").
  // Both throw std::runtime_error with protobuf's reason.
  nlohmann::json to_json(std::string_view type, const std::string& binary) const;
  std::string to_binary(std::string_view type, const nlohmann::json& json) const;
  // to_json of the message with one (repeated) field cleared: what a
  // response says about itself when a resource in it cannot be read.
  nlohmann::json to_json_without(std::string_view type, const std::string& binary, std::string_view field) const;
  // A message's field (of messages, bytes or strings) taken out: `rest` is
  // the message without it (binary), `items` each occurrence's bytes (views
  // into `binary`; one, or none, for a field that is not repeated), so that
  // elements seen before need not be converted again. Throws
  // std::runtime_error when the bytes do not parse.
  struct Split {
    std::string rest;
    std::vector<std::string_view> items;
  };
  Split split(std::string_view type, const std::string& binary, std::string_view field) const;
  int field_number(std::string_view type, std::string_view field) const;
  // The message is in the pool (as a resource of an Any must be to be read).
  bool has_message(std::string_view type) const;
  size_t file_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The one pool of this process (built on first use).
const Messages& messages();

}  // namespace dpukit::mesh::xds
