#include "kdp/core/threads.hpp"

#include <dlfcn.h>

namespace kdp {

namespace {
// Looked up at run time: the BLAS library is whatever libblas.so.3 points to.
template <class F>
F lookup(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}
}  // namespace

int blas_threads() {
  if (auto get = lookup<int (*)()>("openblas_get_num_threads")) return get();
  if (auto get = lookup<int (*)()>("mkl_get_max_threads")) return get();
  return 1;
}

bool set_blas_threads(int threads) {
  if (threads < 1) threads = 1;
  if (auto set = lookup<void (*)(int)>("openblas_set_num_threads")) {
    set(threads);
    return true;
  }
  if (auto set = lookup<void (*)(int)>("mkl_set_num_threads")) {
    set(threads);
    return true;
  }
  return false;
}

}  // namespace kdp
