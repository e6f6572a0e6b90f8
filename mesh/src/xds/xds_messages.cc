#include "xds/xds_messages.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/descriptor_database.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/type_resolver.h>
#include <google/protobuf/util/type_resolver_util.h>
#include <grpcpp/support/byte_buffer.h>

#include <stdexcept>
#include <vector>

namespace dpukit::mesh::xds {

namespace pb = google::protobuf;

namespace {
constexpr const char* kTypeUrlPrefix = "type.googleapis.com";
}

struct Messages::Impl {
  // Files come first from the library's own (generated) pool, then from the
  // set: Go's copies of google/protobuf/*.proto may differ from those
  // libprotobuf was built with, and the library's must win where both exist.
  pb::DescriptorPoolDatabase generated{*pb::DescriptorPool::generated_pool()};
  pb::SimpleDescriptorDatabase ours;
  pb::MergedDescriptorDatabase merged{&generated, &ours};
  pb::DescriptorPool pool{&merged};
  pb::DynamicMessageFactory factory{&pool};
  std::unique_ptr<pb::util::TypeResolver> resolver{pb::util::NewTypeResolverForDescriptorPool(kTypeUrlPrefix, &pool)};
  size_t files = 0;
};

Messages::Messages() : impl_(std::make_unique<Impl>()) {
  pb::FileDescriptorSet set;
  const std::string_view bytes = descriptor_set();
  if (!set.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    throw std::runtime_error("xDS: the embedded descriptor set does not parse");
  for (const pb::FileDescriptorProto& file : set.file()) {
    if (pb::DescriptorPool::generated_pool()->FindFileByName(file.name()) != nullptr) continue;
    if (!impl_->ours.Add(file)) throw std::runtime_error("xDS: descriptor set: cannot add " + file.name());
    ++impl_->files;
  }
  // Build every file now, so that a broken set fails here, not on the first response.
  for (const pb::FileDescriptorProto& file : set.file())
    if (impl_->pool.FindFileByName(file.name()) == nullptr)
      throw std::runtime_error("xDS: descriptor set: " + file.name() + " does not build");
}

Messages::~Messages() = default;

nlohmann::json Messages::to_json(std::string_view type, const std::string& binary) const {
  pb::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;  // Envoy's YAML and our parser use the .proto names
  std::string out;
  const auto status = pb::util::BinaryToJsonString(impl_->resolver.get(), std::string(kTypeUrlPrefix) + "/" + std::string(type),
                                                   binary, &out, options);
  if (!status.ok()) throw std::runtime_error(std::string(status.message()));
  return nlohmann::json::parse(out);
}

std::string Messages::to_binary(std::string_view type, const nlohmann::json& json) const {
  std::string out;
  const auto status = pb::util::JsonToBinaryString(impl_->resolver.get(), std::string(kTypeUrlPrefix) + "/" + std::string(type),
                                                   json.dump(), &out, pb::util::JsonParseOptions());
  if (!status.ok()) throw std::runtime_error(std::string(status.message()));
  return out;
}

nlohmann::json Messages::to_json_without(std::string_view type, const std::string& binary, std::string_view field) const {
  const pb::Descriptor* descriptor = impl_->pool.FindMessageTypeByName(std::string(type));
  if (descriptor == nullptr) throw std::runtime_error("no message " + std::string(type));
  std::unique_ptr<pb::Message> message(impl_->factory.GetPrototype(descriptor)->New());
  if (!message->ParseFromString(binary)) throw std::runtime_error("a " + std::string(type) + " that does not parse");
  if (const pb::FieldDescriptor* f = descriptor->FindFieldByName(std::string(field)))
    message->GetReflection()->ClearField(message.get(), f);
  return to_json(type, message->SerializeAsString());
}

Messages::Split Messages::split(std::string_view type, const std::string& binary, std::string_view field) const {
  using pb::internal::WireFormatLite;
  const pb::Descriptor* descriptor = impl_->pool.FindMessageTypeByName(std::string(type));
  const pb::FieldDescriptor* f = descriptor ? descriptor->FindFieldByName(std::string(field)) : nullptr;
  if (f == nullptr || (f->type() != pb::FieldDescriptor::TYPE_MESSAGE && f->type() != pb::FieldDescriptor::TYPE_BYTES &&
                       f->type() != pb::FieldDescriptor::TYPE_STRING))
    throw std::runtime_error("no message, bytes or string field " + std::string(field) + " in " + std::string(type));
  Split out;
  pb::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(binary.data()), static_cast<int>(binary.size()));
  in.SetRecursionLimit(100);
  for (;;) {
    const int start = in.CurrentPosition();
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    if (WireFormatLite::GetTagFieldNumber(tag) == f->number() &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      if (!in.ReadVarint32(&length)) throw std::runtime_error("a " + std::string(type) + " that does not parse");
      const int at = in.CurrentPosition();
      if (!in.Skip(static_cast<int>(length))) throw std::runtime_error("a " + std::string(type) + " that does not parse");
      out.items.emplace_back(binary.data() + at, length);
      continue;
    }
    if (!WireFormatLite::SkipField(&in, tag)) throw std::runtime_error("a " + std::string(type) + " that does not parse");
    out.rest.append(binary, static_cast<size_t>(start), static_cast<size_t>(in.CurrentPosition() - start));
  }
  if (!in.ConsumedEntireMessage() || in.CurrentPosition() != static_cast<int>(binary.size()))
    throw std::runtime_error("a " + std::string(type) + " that does not parse");
  return out;
}

int Messages::field_number(std::string_view type, std::string_view field) const {
  const pb::Descriptor* descriptor = impl_->pool.FindMessageTypeByName(std::string(type));
  const pb::FieldDescriptor* f = descriptor ? descriptor->FindFieldByName(std::string(field)) : nullptr;
  if (f == nullptr) throw std::runtime_error("no field " + std::string(field) + " in " + std::string(type));
  return f->number();
}

std::string length_delimited(int number, std::string_view bytes) {
  std::string out;
  const auto varint = [&](uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<char>(v));
  };
  varint((static_cast<uint64_t>(number) << 3) | 2);  // wire type 2: length-delimited
  varint(bytes.size());
  out.append(bytes);
  return out;
}

bool Messages::has_message(std::string_view type) const {
  return impl_->pool.FindMessageTypeByName(std::string(type)) != nullptr;
}

size_t Messages::file_count() const { return impl_->files; }

grpc::ByteBuffer to_byte_buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string from_byte_buffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string out;
  out.reserve(buffer.Length());
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

const Messages& messages() {
  static const Messages instance;
  return instance;
}

}  // namespace dpukit::mesh::xds
