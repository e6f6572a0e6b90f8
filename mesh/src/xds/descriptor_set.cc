// The FileDescriptorSet of Envoy's xDS messages (mesh/xds.cmake writes it from
// the pinned go-control-plane envoy module), assembled into the binary so
// that dpukit-mesh needs no file beside it.
#include "xds/xds_messages.h"

// .incbin takes the file as it is; MESH_XDS_DESCRIPTORS is its build path.
asm(".section .rodata\n"
    ".balign 16\n"
    ".globl mesh_xds_descriptors_begin\n"
    ".hidden mesh_xds_descriptors_begin\n"
    ".globl mesh_xds_descriptors_end\n"
    ".hidden mesh_xds_descriptors_end\n"
    "mesh_xds_descriptors_begin:\n"
    ".incbin \"" MESH_XDS_DESCRIPTORS "\"\n"
    "mesh_xds_descriptors_end:\n"
    ".previous\n"
    ".balign 8\n");

extern "C" __attribute__((visibility("hidden"))) const char mesh_xds_descriptors_begin[];
extern "C" __attribute__((visibility("hidden"))) const char mesh_xds_descriptors_end[];

namespace dpukit::mesh::xds {

std::string_view descriptor_set() {
  return {mesh_xds_descriptors_begin, static_cast<size_t>(mesh_xds_descriptors_end - mesh_xds_descriptors_begin)};
}

}  // namespace dpukit::mesh::xds
