# The "envoy + sockmap" baseline (docs/mesh.md): an eBPF sock_ops + sk_msg
# program that redirects loopback TCP between the processes of one cgroup v2,
# its loader library and tool, and their tests. Included from
# mesh/CMakeLists.txt; everything here is skipped (with a message) where
# clang or libbpf is missing, so the rest of the project still builds.
find_program(DPUKIT_BPF_CLANG NAMES clang-14 clang)
pkg_check_modules(LIBBPF IMPORTED_TARGET libbpf>=1.0)

if(NOT DPUKIT_BPF_CLANG OR NOT LIBBPF_FOUND)
  message(STATUS "mesh sockmap baseline: skipped (needs clang-14 and libbpf-dev >= 1.0; scripts/setup.sh installs them)")
  return()
endif()

# The BPF object, beside the libraries.
include(${PROJECT_SOURCE_DIR}/cmake/bpf.cmake)
dpukit_bpf_object(sockmap_redirect_bpf ${CMAKE_CURRENT_SOURCE_DIR}/bpf/sockmap_redirect.bpf.c SOCKMAP_BPF_OBJECT)

add_library(mesh_sockmap STATIC ${CMAKE_CURRENT_SOURCE_DIR}/src/sockmap/sockmap.cc)
target_include_directories(mesh_sockmap PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(mesh_sockmap PUBLIC PkgConfig::LIBBPF dpukit_core)

add_executable(dpukit-mesh-sockmap ${CMAKE_CURRENT_SOURCE_DIR}/tools/dpukit_mesh_sockmap.cc)
target_link_libraries(dpukit-mesh-sockmap PRIVATE mesh_sockmap dpukit_core)
add_dependencies(dpukit-mesh-sockmap sockmap_redirect_bpf)

# Unit tests of what needs no privileges (mount parsing, cgroup paths, bad
# input); the kernel path is tested end to end by python/tests/test_mesh_sockmap.py.
add_executable(mesh_sockmap_tests ${CMAKE_CURRENT_SOURCE_DIR}/tests/sockmap_loader_test.cc)
target_link_libraries(mesh_sockmap_tests PRIVATE mesh_sockmap GTest::gtest GTest::gtest_main)
target_compile_definitions(mesh_sockmap_tests PRIVATE SOCKMAP_BPF_OBJECT="${SOCKMAP_BPF_OBJECT}")
add_dependencies(mesh_sockmap_tests sockmap_redirect_bpf)
gtest_discover_tests(mesh_sockmap_tests DISCOVERY_TIMEOUT 30 PROPERTIES TIMEOUT 120)
