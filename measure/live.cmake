# Live measurement on an interface (issue 11 §1): the XDP program that stands
# for Duet's hardware flow table (measure/bpf/duet_hw.bpf.c), its loader and
# control path (src/live/xdp_flow_table.*) and the AF_XDP receive side of the
# dpu workers (src/live/xsk_receiver.*), and the live run over them
# (src/live/live_run.cc). Included from measure/CMakeLists.txt
# after its targets. libbpf loads the program; AF_XDP's xsk API is libxdp's
# (<xdp/xsk.h>). scripts/setup.sh installs clang-14, libbpf-dev and libxdp-dev.
find_program(DPUKIT_BPF_CLANG NAMES clang-14 clang)
pkg_check_modules(LIBBPF IMPORTED_TARGET libbpf>=1.0)
pkg_check_modules(LIBXDP IMPORTED_TARGET libxdp>=1.2)
if(NOT DPUKIT_BPF_CLANG OR NOT LIBBPF_FOUND OR NOT LIBXDP_FOUND)
  message(FATAL_ERROR "measure (live): needs clang-14, libbpf-dev >= 1.0 and libxdp-dev >= 1.2; run scripts/setup.sh")
endif()

# The BPF object, beside the libraries (<build>/lib), where
# default_duet_hw_object() looks.
include(${PROJECT_SOURCE_DIR}/cmake/bpf.cmake)
dpukit_bpf_object(duet_hw_bpf ${CMAKE_CURRENT_SOURCE_DIR}/bpf/duet_hw.bpf.c DUET_HW_BPF_OBJECT)

file(GLOB MEASURE_LIVE_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/live/*.cc)
target_sources(dpukit_measure PRIVATE ${MEASURE_LIVE_SOURCES})
target_link_libraries(dpukit_measure PUBLIC PkgConfig::LIBXDP PkgConfig::LIBBPF)

# What loads the object at run time needs it built.
foreach(consumer IN ITEMS dpukit-measure measure_tests)
  if(TARGET ${consumer})
    add_dependencies(${consumer} duet_hw_bpf)
  endif()
endforeach()
if(TARGET measure_tests)
  target_compile_definitions(measure_tests PRIVATE DUET_HW_BPF_OBJECT="${DUET_HW_BPF_OBJECT}")
endif()
