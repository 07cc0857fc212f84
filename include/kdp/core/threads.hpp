#pragma once
/// \file
/// Thread counts of the BLAS library behind Kokkos Kernels' host GEMM, and the
/// CPU's handling of denormal floats. OpenBLAS keeps its own thread pool
/// whatever Kokkos partition calls it, so ranks and device partitions sharing
/// a node must each be given their share of cores.

namespace kdp {

/// The BLAS library's thread count (1 when it cannot be asked).
int blas_threads();
/// Sets the BLAS library's thread count; returns false when the library offers
/// no way to (then OPENBLAS_NUM_THREADS at start-up is the only control).
bool set_blas_threads(int threads);

/// The BLAS library's thread count set to `threads` for this object's life,
/// then set back (where the library lets it be set at all).
class ScopedBlasThreads {
 public:
  explicit ScopedBlasThreads(int threads) : before_(blas_threads()) {
    active_ = set_blas_threads(threads);
  }
  ~ScopedBlasThreads() {
    if (active_) set_blas_threads(before_);
  }
  ScopedBlasThreads(const ScopedBlasThreads&) = delete;
  ScopedBlasThreads& operator=(const ScopedBlasThreads&) = delete;

 private:
  int before_;
  bool active_ = false;
};

/// Makes the calling thread a background one, which gives way to the rank's
/// compute threads: on Linux it takes the SCHED_BATCH policy, so that waking
/// it (a data loader's prefetch thread, when the training thread takes a
/// batch) does not preempt the thread that woke it; it runs at the
/// scheduler's next turn with its fair share of a core. Returns false where
/// the system offers no such policy (the thread stays as it was).
bool make_background_thread();

/// Whether the calling thread's floating-point unit treats denormal floats as
/// zero, in and out (x86-64: MXCSR's flush-to-zero and denormals-are-zero;
/// Arm: FPCR's FZ). Training drives optimizer state and activation gradients
/// below 1.2e-38, where the CPU's slow path for denormals costs tens of cycles
/// per operation; flushed, they are 0. Applies to the calling thread and,
/// once Kokkos runs, to the threads of the default host execution space;
/// threads started afterwards by these inherit it. Returns false, changing
/// nothing, on CPUs where kdp cannot set it.
bool set_flush_denormals(bool on);
/// The calling thread's setting (false where it cannot be read).
bool flushes_denormals();

}  // namespace kdp
