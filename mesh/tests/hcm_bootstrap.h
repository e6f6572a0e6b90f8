// The bootstrap that most mesh tests start from, as Envoy's YAML: one HTTP
// listener whose HttpConnectionManager routes to clusters of one endpoint
// each. The tests pass the pieces they vary, indented for their places.
#pragma once

#include <cstdint>
#include <string>

namespace dpukit::mesh::testing {

namespace detail {
inline std::string lines(const std::string& yaml) {
  return yaml.empty() || yaml.back() == '\n' ? yaml : yaml + "\n";
}
}  // namespace detail

// Listener `http` on 127.0.0.1:`port` with one HCM (stat_prefix http):
// `hcm_fields` (at 10 spaces) after its stat_prefix, the route_config's
// `virtual_hosts` (at 12), `http_filters` (at 10) before the router; then
// `clusters` (at 2), if any.
inline std::string hcm_bootstrap(const std::string& virtual_hosts, const std::string& clusters,
                                 const std::string& http_filters = "", const std::string& hcm_fields = "",
                                 uint16_t port = 10000) {
  std::string text = R"(
static_resources:
  listeners:
  - name: http
    address:
      socket_address: {address: 127.0.0.1, port_value: )" +
                     std::to_string(port) + R"(}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: http
)";
  if (!hcm_fields.empty()) text += "          " + detail::lines(hcm_fields);
  text += "          route_config:\n            virtual_hosts:\n" + detail::lines(virtual_hosts) +
          "          http_filters:\n" + detail::lines(http_filters) + R"(          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
)";
  if (!clusters.empty()) text += "  clusters:\n" + detail::lines(clusters);
  return text;
}

// The virtual host `all`: every domain, every path to `cluster`.
inline std::string all_to(const std::string& cluster) {
  return "            - name: all\n              domains: [\"*\"]\n              routes:\n"
         "              - match: {prefix: /}\n                route: {cluster: " +
         cluster + "}\n";
}

// Cluster `name` with one endpoint, 127.0.0.1:`port`; `fields` (at 4 spaces)
// before its load_assignment.
inline std::string one_endpoint_cluster(const std::string& name, uint16_t port, const std::string& fields = "") {
  return "  - name: " + name + "\n" + detail::lines(fields) + "    load_assignment:\n      cluster_name: " + name +
         "\n      endpoints:\n      - lb_endpoints:\n        - endpoint:\n            address:\n"
         "              socket_address: {address: 127.0.0.1, port_value: " +
         std::to_string(port) + "}\n";
}

}  // namespace dpukit::mesh::testing
