# The xDS client (ADS over gRPC, docs/mesh.md): gRPC++ and protobuf from
# Debian; Envoy's API messages as a google.protobuf.FileDescriptorSet written
# at build time from the go-control-plane envoy module pinned in
# mesh/xds/descriptors/go.mod (go.sum checks what the module proxy serves),
# embedded in dpukit-mesh. No .proto file is copied here, and no protobuf
# encoding is written by hand: the client reads xDS as DynamicMessage.
pkg_check_modules(MESH_GRPC REQUIRED IMPORTED_TARGET grpc++ protobuf)
# Go where its installer puts it (as scripts/setup.sh looks), else on PATH.
find_program(GO_EXECUTABLE go HINTS /usr/local/go/bin REQUIRED)

set(MESH_XDS_DESCRIPTORS ${CMAKE_CURRENT_BINARY_DIR}/xds_descriptors.pb)
file(GLOB MESH_XDS_DESCRIPTOR_INPUTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/xds/descriptors/*)
add_custom_command(
  OUTPUT ${MESH_XDS_DESCRIPTORS}
  # -mod=readonly: the build uses exactly go.mod and go.sum, never updates them.
  COMMAND ${CMAKE_COMMAND} -E env "GOFLAGS=-mod=readonly -buildvcs=false"
          ${GO_EXECUTABLE} run . ${MESH_XDS_DESCRIPTORS}
  WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/xds/descriptors
  DEPENDS ${MESH_XDS_DESCRIPTOR_INPUTS}
  COMMENT "xDS: Envoy's API descriptors from go-control-plane/envoy (mesh/xds/descriptors/go.mod)"
  VERBATIM)
add_custom_target(mesh_xds_descriptors DEPENDS ${MESH_XDS_DESCRIPTORS})

file(GLOB MESH_XDS_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/xds/*.cc)
target_sources(dpukit_mesh PRIVATE ${MESH_XDS_SOURCES})
# The descriptor set is assembled into the object (.incbin), so the object depends on it.
set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/src/xds/descriptor_set.cc PROPERTIES
  OBJECT_DEPENDS ${MESH_XDS_DESCRIPTORS}
  COMPILE_DEFINITIONS "MESH_XDS_DESCRIPTORS=\"${MESH_XDS_DESCRIPTORS}\"")
add_dependencies(dpukit_mesh mesh_xds_descriptors)
target_link_libraries(dpukit_mesh PRIVATE PkgConfig::MESH_GRPC)
