# Warnings and sanitizers for kdp's own targets (not its dependencies).
add_library(kdp_warnings INTERFACE)
target_compile_options(kdp_warnings INTERFACE -Wall -Wextra)

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
