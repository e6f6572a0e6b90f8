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

# The BPF object, compiled for the BPF target. <asm/types.h> lives in the
# multiarch include directory (Debian), which clang does not search for
# -target bpf: take it from the host compiler's implicit include directories.
set(SOCKMAP_BPF_SOURCE ${CMAKE_CURRENT_SOURCE_DIR}/bpf/sockmap_redirect.bpf.c)
set(SOCKMAP_BPF_OBJECT ${CMAKE_LIBRARY_OUTPUT_DIRECTORY}/sockmap_redirect.bpf.o)
set(SOCKMAP_BPF_INCLUDES)
if(CMAKE_LIBRARY_ARCHITECTURE)
  foreach(dir IN LISTS CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
    if(dir MATCHES "/${CMAKE_LIBRARY_ARCHITECTURE}$")
      list(APPEND SOCKMAP_BPF_INCLUDES -I${dir})
    endif()
  endforeach()
endif()
add_custom_command(
  OUTPUT ${SOCKMAP_BPF_OBJECT}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_LIBRARY_OUTPUT_DIRECTORY}
  COMMAND ${DPUKIT_BPF_CLANG} -target bpf -O2 -g -Wall ${SOCKMAP_BPF_INCLUDES}
          -c ${SOCKMAP_BPF_SOURCE} -o ${SOCKMAP_BPF_OBJECT}
  DEPENDS ${SOCKMAP_BPF_SOURCE}
  COMMENT "Compiling the BPF object sockmap_redirect.bpf.o"
  VERBATIM)
add_custom_target(sockmap_redirect_bpf ALL DEPENDS ${SOCKMAP_BPF_OBJECT})

add_library(mesh_sockmap STATIC ${CMAKE_CURRENT_SOURCE_DIR}/src/sockmap/sockmap.cc)
target_include_directories(mesh_sockmap PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(mesh_sockmap PUBLIC PkgConfig::LIBBPF)

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
