#pragma once
/// \file
/// Thread counts of the BLAS library behind Kokkos Kernels' host GEMM. OpenBLAS
/// keeps its own thread pool whatever Kokkos partition calls it, so ranks and
/// device partitions sharing a node must each be given their share of cores.

namespace kdp {

/// The BLAS library's thread count (1 when it cannot be asked).
int blas_threads();
/// Sets the BLAS library's thread count; returns false when the library offers
/// no way to (then OPENBLAS_NUM_THREADS at start-up is the only control).
bool set_blas_threads(int threads);

}  // namespace kdp
