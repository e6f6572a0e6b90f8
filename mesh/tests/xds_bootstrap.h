// The bootstrap of a node proxy configured by xDS, shared by the xDS tests
// (config_xds_test.cc, mesh_xds_test.cc): the ADS cluster (HTTP/2, static)
// and dynamic_resources.
#pragma once

#include <string>

namespace dpukit::mesh::xds_test {

inline const std::string kXdsBootstrap = R"(
node: {id: node-a, cluster: mesh}
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: 9901}}
dynamic_resources:
  ads_config:
    api_type: GRPC
    transport_api_version: V3
    grpc_services:
    - envoy_grpc: {cluster_name: xds_cluster}
  lds_config: {ads: {}, resource_api_version: V3}
  cds_config: {ads: {}, resource_api_version: V3}
static_resources:
  clusters:
  - name: xds_cluster
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {}
    load_assignment:
      cluster_name: xds_cluster
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {address: 127.0.0.1, port_value: 18000}
)";

}  // namespace dpukit::mesh::xds_test
