# Finds kdp's dependencies and hides the Kokkos flavour behind one target,
# kdp_kokkos, so that no other CMake file knows which Kokkos it got:
#  - Debian/Trilinos packages (Kokkos 3.4): targets trilinos_kokkoscore and
#    trilinos_kokkoskernels that carry no include directories;
#  - a standalone Kokkos 4.x install: Kokkos::kokkos and Kokkos::kokkoskernels.
# The flavour is recorded in KDP_KOKKOS_FLAVOR for kdpConfig.cmake.

find_package(KokkosKernels REQUIRED)
add_library(kdp_kokkos INTERFACE)
if(TARGET Kokkos::kokkoskernels)
  set(KDP_KOKKOS_FLAVOR standalone)
  target_link_libraries(kdp_kokkos INTERFACE Kokkos::kokkoskernels Kokkos::kokkos)
elseif(TARGET trilinos_kokkoskernels)
  set(KDP_KOKKOS_FLAVOR trilinos)
  # The Trilinos targets carry no include directories; KokkosKernels_INCLUDE_DIRS
  # has them. Their *_CXX_FLAGS are deliberately not used.
  target_include_directories(kdp_kokkos SYSTEM INTERFACE ${KokkosKernels_INCLUDE_DIRS})
  target_link_libraries(kdp_kokkos INTERFACE trilinos_kokkoskernels trilinos_kokkoscore)
else()
  message(FATAL_ERROR "KokkosKernels was found but exports neither Kokkos::kokkoskernels "
                      "nor trilinos_kokkoskernels; set KokkosKernels_DIR to a Kokkos Kernels install")
endif()
# The execution space kdp's kernels run in (Kokkos' default: the first enabled
# of Cuda, HIP, SYCL, OpenMP, Threads, Serial), which names the tests' runs.
# A standalone Kokkos lists its backends in Kokkos_DEVICES; Trilinos' in its
# configuration header.
if(KDP_KOKKOS_FLAVOR STREQUAL "standalone")
  set(_kdp_backends ${Kokkos_DEVICES})
else()
  find_file(_kdp_kokkos_config KokkosCore_config.h PATHS ${KokkosKernels_INCLUDE_DIRS} NO_DEFAULT_PATH)
  file(STRINGS "${_kdp_kokkos_config}" _kdp_backends REGEX "^#define KOKKOS_ENABLE_[A-Z]+$")
  list(TRANSFORM _kdp_backends REPLACE "^#define KOKKOS_ENABLE_" "")
endif()
set(KDP_EXECUTION_SPACE Serial)
foreach(_space Threads OpenMP SYCL HIP Cuda)  # lowest priority first
  string(TOUPPER ${_space} _upper)
  if(_upper IN_LIST _kdp_backends)
    set(KDP_EXECUTION_SPACE ${_space})
  endif()
endforeach()
message(STATUS "kdp: Kokkos flavour ${KDP_KOKKOS_FLAVOR} (KokkosKernels ${KokkosKernels_VERSION}), "
               "kernels on ${KDP_EXECUTION_SPACE}")
# The other host spaces of this Kokkos, where the default one is a host space
# too (a Kokkos 4 with OpenMP and Serial): the unit suites run on each of them
# as well, under its name (tests/CMakeLists.txt), as Cabana's do.
set(_kdp_other_spaces "")
if(KDP_EXECUTION_SPACE MATCHES "^(Serial|OpenMP)$")
  foreach(_space Serial OpenMP)
    string(TOUPPER ${_space} _upper)
    if(_upper IN_LIST _kdp_backends AND NOT _space STREQUAL KDP_EXECUTION_SPACE)
      list(APPEND _kdp_other_spaces ${_space})
    endif()
  endforeach()
endif()
set(KDP_EXTRA_TEST_SPACES "${_kdp_other_spaces}" CACHE STRING
    "Host execution spaces the unit suites also run on, beside ${KDP_EXECUTION_SPACE} (default: every other one this Kokkos enables)")
foreach(_space IN LISTS KDP_EXTRA_TEST_SPACES)
  string(TOUPPER "${_space}" _upper)
  if(NOT _space MATCHES "^(Serial|OpenMP)$" OR NOT _upper IN_LIST _kdp_backends
     OR _space STREQUAL KDP_EXECUTION_SPACE)
    message(FATAL_ERROR "KDP_EXTRA_TEST_SPACES names '${_space}': it takes Serial or OpenMP, "
                        "enabled in this Kokkos (${_kdp_backends}) and other than the default "
                        "space, ${KDP_EXECUTION_SPACE}")
  endif()
endforeach()
if(KDP_EXTRA_TEST_SPACES)
  message(STATUS "kdp: the unit suites also run on ${KDP_EXTRA_TEST_SPACES}")
endif()
# On CUDA, GEMMs go to cuBLAS through a handle per instance (kokkos_compat.hpp).
set(KDP_KOKKOS_CUDA OFF)
if(Kokkos_ENABLE_CUDA)
  set(KDP_KOKKOS_CUDA ON)
  find_package(CUDAToolkit REQUIRED)
  target_link_libraries(kdp_kokkos INTERFACE CUDA::cublas CUDA::cudart)
  message(STATUS "kdp: CUDA backend (CUDA ${CUDAToolkit_VERSION}), cuBLAS per instance")
endif()

# oneDNN (optional): CPU convolutions and bf16 products on AMX/AVX-512 where it
# measures faster than kdp's own path. Found by its header and library, not by
# its CMake package (Debian's asks for OpenCL's development files, which kdp
# does not use); kdp's calls are written for its 2.x API.
set(KDP_ENABLE_ONEDNN AUTO CACHE STRING "oneDNN for CPU convolutions and bf16 products: AUTO (when found), ON (required), OFF")
set_property(CACHE KDP_ENABLE_ONEDNN PROPERTY STRINGS AUTO ON OFF)
set(KDP_HAVE_ONEDNN OFF)
if(NOT KDP_ENABLE_ONEDNN STREQUAL "OFF" AND NOT KDP_KOKKOS_CUDA)
  find_path(KDP_ONEDNN_INCLUDE_DIR oneapi/dnnl/dnnl_version.h)
  find_library(KDP_ONEDNN_LIBRARY NAMES dnnl)
  set(_kdp_onednn_major 0)
  if(KDP_ONEDNN_INCLUDE_DIR)
    file(STRINGS ${KDP_ONEDNN_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h _kdp_onednn_version
         REGEX "#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*DNNL_VERSION_MAJOR ([0-9]+).*" "\\1" _kdp_onednn_major "${_kdp_onednn_version}")
    string(REGEX REPLACE ".*DNNL_VERSION_MINOR ([0-9]+).*" "\\1" _kdp_onednn_minor "${_kdp_onednn_version}")
  endif()
  if(KDP_ONEDNN_INCLUDE_DIR AND KDP_ONEDNN_LIBRARY AND _kdp_onednn_major EQUAL 2)
    add_library(kdp_onednn INTERFACE)
    target_include_directories(kdp_onednn SYSTEM INTERFACE ${KDP_ONEDNN_INCLUDE_DIR})
    target_link_libraries(kdp_onednn INTERFACE ${KDP_ONEDNN_LIBRARY} ${CMAKE_DL_LIBS})
    set(KDP_HAVE_ONEDNN ON)
    message(STATUS "kdp: oneDNN ${_kdp_onednn_major}.${_kdp_onednn_minor} (${KDP_ONEDNN_LIBRARY})")
  elseif(KDP_ENABLE_ONEDNN STREQUAL "ON")
    message(FATAL_ERROR "KDP_ENABLE_ONEDNN=ON but no oneDNN 2.x was found (header "
                        "oneapi/dnnl/dnnl_version.h: ${KDP_ONEDNN_INCLUDE_DIR}, library: "
                        "${KDP_ONEDNN_LIBRARY}, major version ${_kdp_onednn_major}); install "
                        "libdnnl-dev or set CMAKE_PREFIX_PATH")
  else()
    message(STATUS "kdp: no oneDNN 2.x found: convolutions and bf16 products take kdp's own path")
  endif()
endif()

find_package(fmt REQUIRED)
find_package(Threads REQUIRED)

if(KDP_ENABLE_MPI)
  find_package(MPI REQUIRED COMPONENTS CXX)
  # Flags every MPI launch needs here: running as root (CI does) and more ranks
  # than cores (3 ranks on 2 cores) both need Open MPI's consent.
  if(MPIEXEC_EXECUTABLE)
    execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _kdp_mpiexec_version
                    ERROR_QUIET)
    if(_kdp_mpiexec_version MATCHES "Open MPI|OpenRTE")
      set(_kdp_ompi_flags --oversubscribe)
      execute_process(COMMAND id -u OUTPUT_VARIABLE _kdp_uid OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(_kdp_uid STREQUAL "0")
        list(PREPEND _kdp_ompi_flags --allow-run-as-root)
      endif()
      foreach(_flag IN LISTS _kdp_ompi_flags)
        if(NOT MPIEXEC_PREFLAGS MATCHES "${_flag}")
          list(APPEND MPIEXEC_PREFLAGS ${_flag})
        endif()
      endforeach()
      set(MPIEXEC_PREFLAGS "${MPIEXEC_PREFLAGS}" CACHE STRING "Flags for mpiexec before the executable" FORCE)
    endif()
  endif()
endif()

if(KDP_ENABLE_HDF5)
  find_package(HDF5 REQUIRED COMPONENTS C)
endif()

if(KDP_ENABLE_EXAMPLES OR KDP_ENABLE_HDF5)
  find_package(CLI11 REQUIRED)
  find_package(nlohmann_json REQUIRED)
endif()
if(KDP_ENABLE_HDF5)
  find_package(ZLIB REQUIRED)
endif()
if(KDP_ENABLE_TESTS)
  find_package(GTest REQUIRED)
endif()
if(KDP_ENABLE_PERF)
  find_package(benchmark REQUIRED)
endif()
