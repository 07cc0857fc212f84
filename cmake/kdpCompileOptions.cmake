# Warnings and sanitizers for kdp's own targets (not its dependencies).
add_library(kdp_warnings INTERFACE)
target_compile_options(kdp_warnings INTERFACE -Wall -Wextra)
# An unused constant of a file's own, as nvcc's warning 177 reports it (the
# device compiler's pass compiles the portable branch of kdp's kernels, where
# a constant of the x86 branch goes unused): GCC leaves it out of -Wall in C++.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(kdp_warnings INTERFACE -Wunused-const-variable=1)
elseif(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  target_compile_options(kdp_warnings INTERFACE -Wunused-const-variable)
endif()

if(KDP_ENABLE_SANITIZERS)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

if(KDP_ENABLE_FUZZING)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KDP_ENABLE_FUZZING needs clang (libFuzzer); configure with CXX=clang++")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address)
endif()

# Code generation of kdp's own sources (not its users'): no kdp kernel reads
# floating-point exception flags or traps on them, so GCC may evaluate both
# sides of a select on a comparison and vectorize the loop (clang does so by
# default). Rounding, NaN and infinity handling stay IEEE. a * b + c is not
# contracted into a fused multiply-add: kdp's host kernels are compiled for
# several instruction sets (kernels/native/host_kernels.hpp), and every
# variant must round as the others do. No kdp code reads errno after a math
# function, so a square root is the instruction alone (and vectorizes) rather
# than the instruction and a library call for negative input.
add_library(kdp_codegen INTERFACE)
target_compile_options(kdp_codegen INTERFACE
  $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-fno-trapping-math -ffp-contract=off -fno-math-errno>)
