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
# default_duet_hw_object() looks. <asm/types.h> lives in the multiarch include
# directory (Debian), which clang does not search for -target bpf: take it
# from the host compiler's implicit include directories.
set(DUET_HW_BPF_SOURCE ${CMAKE_CURRENT_SOURCE_DIR}/bpf/duet_hw.bpf.c)
set(DUET_HW_BPF_OBJECT ${CMAKE_LIBRARY_OUTPUT_DIRECTORY}/duet_hw.bpf.o)
set(DUET_HW_BPF_INCLUDES)
if(CMAKE_LIBRARY_ARCHITECTURE)
  foreach(dir IN LISTS CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
    if(dir MATCHES "/${CMAKE_LIBRARY_ARCHITECTURE}$")
      list(APPEND DUET_HW_BPF_INCLUDES -I${dir})
    endif()
  endforeach()
endif()
add_custom_command(
  OUTPUT ${DUET_HW_BPF_OBJECT}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_LIBRARY_OUTPUT_DIRECTORY}
  COMMAND ${DPUKIT_BPF_CLANG} -target bpf -O2 -g -Wall ${DUET_HW_BPF_INCLUDES}
          -c ${DUET_HW_BPF_SOURCE} -o ${DUET_HW_BPF_OBJECT}
  DEPENDS ${DUET_HW_BPF_SOURCE}
  COMMENT "Compiling the BPF object duet_hw.bpf.o"
  VERBATIM)
add_custom_target(duet_hw_bpf ALL DEPENDS ${DUET_HW_BPF_OBJECT})

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
