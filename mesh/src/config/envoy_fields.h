#pragma once

#include <string_view>
#include <vector>

namespace dpukit::mesh::config {

// Every field of the Envoy message (full proto name, e.g.
// "envoy.config.cluster.v3.Cluster"), or nullptr for a message not in the table.
const std::vector<std::string_view>* envoy_fields(std::string_view message);

}  // namespace dpukit::mesh::config
