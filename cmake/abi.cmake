# cmake/abi.cmake: each library exports what the headers declare
# (docs/libraries.md, "The ABI").
#
# Every shared library links with a version script of two nodes, written
# by cmake/wt_abi.py just before the library links (PRE_LINK) from the
# symbols its objects define with default visibility:
#   WT_0.1          what an installed header declares (the ABI), and
#                   `local: *` (everything else is hidden);
#   WT_PRIVATE_0.1  what a private header (common/internal/wt/, backends/,
#                   the test-only alloc_fault.h, libwt_proto's health,
#                   reflection and descriptor-set headers) declares between
#                   WT_API_BEGIN and WT_API_END: wt's own libraries,
#                   modules, tools and tests take it; no promise to anyone
#                   else.
# A default-visibility symbol no header declares fails the link. What the
# headers declare is read once per build (wt_abi_decls), with the
# preprocessor, into ${WT_ABI_DIR}/decls.txt. The `abi` test checks the
# installed tree against the installed headers (tests/CMakeLists.txt).
#
# Included before the libraries; each library's folder calls
# wt_abi_library(TARGET) after add_library (a PRE_LINK step belongs to the
# target's folder), and the root calls wt_abi_finish() after all of them.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
if(NOT CMAKE_READELF)
  find_program(CMAKE_READELF NAMES readelf llvm-readelf REQUIRED)
endif()

set(WT_ABI_SCRIPT ${CMAKE_SOURCE_DIR}/cmake/wt_abi.py)
# The nodes' version is the SONAME's (MAJOR.MINOR): WT_0.1, WT_PRIVATE_0.1.
set(WT_ABI_VERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
set(WT_ABI_DIR ${CMAKE_BINARY_DIR}/abi)
file(MAKE_DIRECTORY ${WT_ABI_DIR})

# wt_abi_library(TARGET [GENERATED]): TARGET links with the version script
# written just before, from its objects. GENERATED (libwt_proto): what no
# header declares is hidden rather than an error.
function(wt_abi_library lib)
  set(map ${WT_ABI_DIR}/lib${lib}.map)
  set(generated "")
  if("GENERATED" IN_LIST ARGN)
    set(generated --generated)
  endif()
  add_custom_command(TARGET ${lib} PRE_LINK
    COMMAND Python3::Interpreter ${WT_ABI_SCRIPT} map
            --decls ${WT_ABI_DIR}/decls.txt --readelf ${CMAKE_READELF}
            --abi-version ${WT_ABI_VERSION}
            --out ${map} ${generated} $<TARGET_OBJECTS:${lib}>
    COMMAND_EXPAND_LISTS VERBATIM)
  target_link_options(${lib} PRIVATE "LINKER:--version-script=${map}")
  # A change of what the headers declare relinks (and rewrites the map).
  set_property(TARGET ${lib} APPEND PROPERTY LINK_DEPENDS
               ${WT_ABI_DIR}/decls.txt)
  set_property(GLOBAL APPEND PROPERTY WT_ABI_LIBRARIES ${lib})
endfunction()

# wt_abi_finish(): reads the headers, before any library links.
function(wt_abi_finish)
  # The installed headers: those install() puts under include/ (the root
  # CMakeLists.txt installs WT_PUBLIC_HEADER_DIRS and libwt_proto's two).
  set(WT_ABI_PUBLIC ${WT_PROTO_PUBLIC_HEADERS})
  foreach(dir ${WT_PUBLIC_HEADER_DIRS})
    file(GLOB hdrs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${dir}/*.h)
    list(APPEND WT_ABI_PUBLIC ${hdrs})
  endforeach()
  # The private headers one library offers another; a backend's only where
  # it is built (UCX's need UCX's headers).
  file(GLOB WT_ABI_PRIVATE CONFIGURE_DEPENDS
       ${CMAKE_SOURCE_DIR}/common/internal/wt/*.h ${CMAKE_SOURCE_DIR}/backends/*.h)
  foreach(b ${WT_BACKENDS})
    file(GLOB hdrs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/backends/${b}/*.h)
    list(APPEND WT_ABI_PRIVATE ${hdrs})
  endforeach()
  list(APPEND WT_ABI_PRIVATE ${CMAKE_SOURCE_DIR}/common/src/core/alloc_fault.h
       ${WT_PROTO_PRIVATE_HEADERS})

  # The headers as wt's libraries see them: their include folders, their
  # dependencies' flags, the build's definitions. (alloc_fault.h without its
  # malloc macros: WT_ALLOC_FAULT_IMPL.)
  set(WT_ABI_CFLAGS -D_GNU_SOURCE -DWT_ALLOC_FAULT_IMPL)
  foreach(dir common/include common/internal server/include client/include
              consumer/include)
    list(APPEND WT_ABI_CFLAGS -I${CMAKE_SOURCE_DIR}/${dir})
  endforeach()
  foreach(dir ${CMAKE_BINARY_DIR}/proto/gen ${WT_BACKEND_INCLUDES})
    list(APPEND WT_ABI_CFLAGS -I${dir})
  endforeach()
  list(APPEND WT_ABI_CFLAGS ${GRPC_CFLAGS} ${PROTOBUFC_CFLAGS})
  foreach(opt WITH_UCX WITH_CUDA WITH_NCCL ALLOC_FAULTS)
    if(WT_${opt})
      list(APPEND WT_ABI_CFLAGS -DWT_${opt})
    endif()
  endforeach()
  if(WT_WITH_UCX)
    list(APPEND WT_ABI_CFLAGS ${UCX_CFLAGS})
  endif()
  if(WT_LOCK_CHECK_ON)
    list(APPEND WT_ABI_CFLAGS -DWT_LOCK_CHECK)
  endif()

  # decls.txt is rewritten only when what it says changes; the stamp says
  # the headers were read. The generated proto headers' changes follow their
  # .proto files.
  # (A prefix compared as text: the build's path is no regex, e.g. c++/.)
  set(WT_ABI_WATCHED "")
  foreach(h ${WT_ABI_PUBLIC} ${WT_ABI_PRIVATE})
    string(FIND "${h}" "${CMAKE_BINARY_DIR}/" at)
    if(NOT at EQUAL 0)
      list(APPEND WT_ABI_WATCHED ${h})
    endif()
  endforeach()
  add_custom_command(
    OUTPUT ${WT_ABI_DIR}/decls.stamp
    BYPRODUCTS ${WT_ABI_DIR}/decls.txt
    COMMAND Python3::Interpreter ${WT_ABI_SCRIPT} decls
            --cc ${CMAKE_C_COMPILER} --out ${WT_ABI_DIR}/decls.txt
            --stamp ${WT_ABI_DIR}/decls.stamp
            --public ${WT_ABI_PUBLIC} --private ${WT_ABI_PRIVATE}
            -- ${WT_ABI_CFLAGS}
    DEPENDS ${WT_ABI_SCRIPT} ${WT_ABI_WATCHED} ${WT_PROTO_DEFINITIONS}
            ${CMAKE_SOURCE_DIR}/cmake/embed.cmake
    COMMENT "wt ABI: what the installed and the private headers declare"
    COMMAND_EXPAND_LISTS VERBATIM)
  add_custom_target(wt_abi_decls DEPENDS ${WT_ABI_DIR}/decls.stamp)
  add_dependencies(wt_abi_decls wt_proto_gen)

  get_property(libs GLOBAL PROPERTY WT_ABI_LIBRARIES)
  foreach(lib ${libs})
    add_dependencies(${lib} wt_abi_decls)
  endforeach()
endfunction()
