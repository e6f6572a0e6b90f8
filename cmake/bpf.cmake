# dpukit_bpf_object(<target> <source.bpf.c> <out-var>): compiles an eBPF
# program with DPUKIT_BPF_CLANG for the BPF target into
# <build>/lib/<source name>.o under a custom target of its own (built by ALL),
# and sets <out-var> to the object's path. <asm/types.h> lives in the
# multiarch include directory (Debian), which clang does not search for
# -target bpf: it is taken from the host compiler's implicit include
# directories. Used by mesh (the sockmap baseline) and measure (Duet's XDP
# hardware tier).
function(dpukit_bpf_object target source out_var)
  get_filename_component(name ${source} NAME_WE)
  set(object ${CMAKE_LIBRARY_OUTPUT_DIRECTORY}/${name}.bpf.o)
  set(includes -I${PROJECT_SOURCE_DIR}/core/bpf)  # percpu_counters.bpf.h
  if(CMAKE_LIBRARY_ARCHITECTURE)
    foreach(dir IN LISTS CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
      if(dir MATCHES "/${CMAKE_LIBRARY_ARCHITECTURE}$")
        list(APPEND includes -I${dir})
      endif()
    endforeach()
  endif()
  add_custom_command(
    OUTPUT ${object}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_LIBRARY_OUTPUT_DIRECTORY}
    COMMAND ${DPUKIT_BPF_CLANG} -target bpf -O2 -g -Wall ${includes} -c ${source} -o ${object}
    DEPENDS ${source} ${PROJECT_SOURCE_DIR}/core/bpf/percpu_counters.bpf.h
    COMMENT "Compiling the BPF object ${name}.bpf.o"
    VERBATIM)
  add_custom_target(${target} ALL DEPENDS ${object})
  set(${out_var} ${object} PARENT_SCOPE)
endfunction()
