// The HTTP/2 options of the configuration plane: the HCM's codec_type and
// http2_protocol_options, and a cluster's HttpProtocolOptions choosing
// HTTP/2 with its Http2ProtocolOptions. Defaults are Envoy 1.40's (what its
// SETTINGS frame advertises); every field outside the implemented ones is
// refused by name.
#include <gtest/gtest.h>

#include <string>

#include "config/bootstrap.h"
#include "hcm_bootstrap.h"

namespace dpukit::mesh::config {
namespace {

const std::string kH2Cluster = R"(typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: #OPTS#)";

// The HCM with `hcm` (its fields), routing everything to cluster grpc, which
// chooses HTTP/2 with `cluster_opts` (its Http2ProtocolOptions) when given.
std::string config(const std::string& hcm, const std::string& cluster_opts = "") {
  std::string c = cluster_opts.empty() ? "" : "    " + kH2Cluster;
  if (!c.empty()) c.replace(c.find("#OPTS#"), 6, cluster_opts);
  return testing::hcm_bootstrap(testing::all_to("grpc"), testing::one_endpoint_cluster("grpc", 50051, c), "", hcm);
}

std::string error_of(const std::string& yaml) {
  try {
    parse_bootstrap(yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigH2, CodecTypesAndEnvoyDefaults) {
  auto b = parse_bootstrap(config("codec_type: HTTP2"));
  const auto& h = *b.listeners[0].filter_chains[0].filters[0].hcm;
  EXPECT_EQ(h.codec_type, HttpConnectionManager::Codec::kHttp2);
  EXPECT_EQ(h.http2_protocol_options.max_concurrent_streams, 1024u);
  EXPECT_EQ(h.http2_protocol_options.initial_stream_window_size, 16u * 1024 * 1024);
  EXPECT_EQ(h.http2_protocol_options.initial_connection_window_size, 24u * 1024 * 1024);
  EXPECT_EQ(parse_bootstrap(config("")).listeners[0].filter_chains[0].filters[0].hcm->codec_type, HttpConnectionManager::Codec::kAuto);
  EXPECT_NE(error_of(config("codec_type: HTTP3")).find("HTTP3 is not supported by dpukit-mesh"), std::string::npos);
}

TEST(ConfigH2, HcmHttp2ProtocolOptions) {
  auto b = parse_bootstrap(config(
      "codec_type: AUTO\n          http2_protocol_options: {max_concurrent_streams: 100, "
      "initial_stream_window_size: 65535, initial_connection_window_size: 2147483647}"));
  const auto& o = b.listeners[0].filter_chains[0].filters[0].hcm->http2_protocol_options;
  EXPECT_EQ(o.max_concurrent_streams, 100u);
  EXPECT_EQ(o.initial_stream_window_size, 65535u);
  EXPECT_EQ(o.initial_connection_window_size, 2147483647u);
  // The JSON dump carries them (and round-trips through the parser).
  auto j = to_json(b);
  const auto& hj = j["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
  EXPECT_EQ(hj["http2_protocol_options"]["max_concurrent_streams"], 100);
  EXPECT_EQ(hj["http2_protocol_options"]["initial_stream_window_size"], 65535);
  EXPECT_EQ(parse_bootstrap(j.dump()).listeners[0].filter_chains[0].filters[0].hcm->http2_protocol_options.max_concurrent_streams, 100u);
}

TEST(ConfigH2, HcmHttp2ProtocolOptionsFaults) {
  const std::string at = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http2_protocol_options";
  // Below HTTP/2's minimum window, above 2^31-1, zero streams.
  EXPECT_NE(error_of(config("http2_protocol_options: {initial_stream_window_size: 1000}")).find(at + ".initial_stream_window_size"),
            std::string::npos);
  EXPECT_NE(error_of(config("http2_protocol_options: {initial_connection_window_size: 2147483648}"))
                .find(at + ".initial_connection_window_size"),
            std::string::npos);
  EXPECT_NE(error_of(config("http2_protocol_options: {max_concurrent_streams: 0}")).find(at + ".max_concurrent_streams"),
            std::string::npos);
  // An Envoy field we do not carry out is refused by name; a misspelt one is unknown.
  std::string e = error_of(config("http2_protocol_options: {hpack_table_size: 0}"));
  EXPECT_NE(e.find(at + ".hpack_table_size"), std::string::npos) << e;
  EXPECT_NE(e.find("not supported by dpukit-mesh"), std::string::npos) << e;
  e = error_of(config("http2_protocol_options: {max_concurent_streams: 5}"));
  EXPECT_NE(e.find("unknown field"), std::string::npos) << e;
  // A listener's HTTP/2 sends no keepalive PINGs here: refused, not ignored.
  e = error_of(config("http2_protocol_options: {connection_keepalive: {interval: 1s, timeout: 1s}}"));
  EXPECT_NE(e.find(at + " (line"), std::string::npos) << e;
  EXPECT_NE(e.find("connection_keepalive is not supported on a listener's HTTP/2"), std::string::npos) << e;
  // HTTP1 never serves HTTP/2: its options would be ignored, so they are refused.
  e = error_of(config("codec_type: HTTP1\n          http2_protocol_options: {}"));
  EXPECT_NE(e.find("needs codec_type AUTO or HTTP2"), std::string::npos) << e;
}

TEST(ConfigH2, ClusterHttp2ProtocolOptions) {
  auto b = parse_bootstrap(config("", "{}"));
  EXPECT_TRUE(b.clusters[0].http2);
  EXPECT_EQ(b.clusters[0].http2_protocol_options.initial_stream_window_size, 16u * 1024 * 1024);
  b = parse_bootstrap(config("", "{max_concurrent_streams: 10, initial_stream_window_size: 1048576}"));
  EXPECT_EQ(b.clusters[0].http2_protocol_options.max_concurrent_streams, 10u);
  EXPECT_EQ(b.clusters[0].http2_protocol_options.initial_stream_window_size, 1048576u);
  EXPECT_EQ(b.clusters[0].http2_protocol_options.initial_connection_window_size, 24u * 1024 * 1024);
  auto j = to_json(b);
  EXPECT_EQ(j["static_resources"]["clusters"][0]["typed_extension_protocol_options"]
             ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["explicit_http_config"]
             ["http2_protocol_options"]["max_concurrent_streams"],
            10);
  std::string e = error_of(config("", "{allow_connect: true}"));
  EXPECT_NE(e.find("explicit_http_config.http2_protocol_options.allow_connect"), std::string::npos) << e;
  EXPECT_NE(e.find("not supported by dpukit-mesh"), std::string::npos) << e;
}

}  // namespace
}  // namespace dpukit::mesh::config
