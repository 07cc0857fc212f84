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
message(STATUS "kdp: Kokkos flavour ${KDP_KOKKOS_FLAVOR} (KokkosKernels ${KokkosKernels_VERSION})")
# On CUDA, GEMMs go to cuBLAS through a handle per instance (kokkos_compat.hpp).
set(KDP_KOKKOS_CUDA OFF)
if(Kokkos_ENABLE_CUDA)
  set(KDP_KOKKOS_CUDA ON)
  find_package(CUDAToolkit REQUIRED)
  target_link_libraries(kdp_kokkos INTERFACE CUDA::cublas CUDA::cudart)
  message(STATUS "kdp: CUDA backend (CUDA ${CUDAToolkit_VERSION}), cuBLAS per instance")
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
