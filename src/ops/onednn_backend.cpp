// kdp's calls into oneDNN (2.x API). Primitives are made once per shape and
// kept (making one compiles its kernel), per calling thread with the thread's
// own engine and stream; every call runs with kdp's thread count and within
// the instruction sets cpu_isa() allows.
#include <dlfcn.h>

#include <cstring>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

#include "core/cpu_isa.hpp"
#include "kdp/core/threads.hpp"
#include "onednn.hpp"

static_assert(DNNL_VERSION_MAJOR == 2, "kdp's oneDNN calls are written for oneDNN 2.x");

namespace kdp::ops_detail::onednn {

namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

// oneDNN may use no wider instructions than kdp's own kernels: KDP_MAX_CPU_ISA
// caps both. (It takes the cap once, before its first primitive.)
void cap_instruction_sets() {
  static std::once_flag once;
  std::call_once(once, [] {
    using detail::CpuIsa;
    const CpuIsa isa = detail::cpu_isa();
    if (isa >= CpuIsa::Amx) return;
    dnnl::set_max_cpu_isa(isa >= CpuIsa::Avx512Bf16 ? dnnl::cpu_isa::avx512_core_bf16
                          : isa >= CpuIsa::Avx512   ? dnnl::cpu_isa::avx512_core
                          : isa >= CpuIsa::Avx2     ? dnnl::cpu_isa::avx2
                                                    : dnnl::cpu_isa::sse41);
  });
}

// oneDNN's OpenMP runtime sizes its parallel regions by the calling thread's
// OpenMP setting: kdp's share of the cores (the BLAS's count), looked up at
// run time since kdp itself does not link OpenMP.
void use_kdp_threads() {
  using SetThreads = void (*)(int);
  static const auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  thread_local int applied = 0;
  const int threads = blas_threads();
  if (set != nullptr && threads != applied) {
    set(threads);
    applied = threads;
  }
}

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

Context& context() {
  cap_instruction_sets();
  thread_local Context c;
  use_kdp_threads();
  return c;
}

// Row-major strides of a matrix stored with row length `ld`, read transposed or not.
dims strides(bool transposed, int64_t ld) {
  return transposed ? dims{1, ld} : dims{ld, 1};
}

using MatmulKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                             uint32_t, uint32_t>;

uint32_t bits_of(float v) {
  uint32_t u = 0;
  std::memcpy(&u, &v, sizeof(u));
  return u;
}

}  // namespace

bool available() {
  return true;
}

void matmul_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                 float* c, int64_t ldc) {
  Context& ctx = context();
  const dnnl::memory::desc a_md({m, k}, dt::bf16, strides(trans_a, lda));
  const dnnl::memory::desc b_md({k, n}, dt::bf16, strides(trans_b, ldb));
  const dnnl::memory::desc c_md({m, n}, dt::f32, dims{ldc, 1});
  thread_local std::map<MatmulKey, dnnl::matmul> made;
  const MatmulKey key{trans_a, trans_b, m, n, k, lda, ldb, ldc, bits_of(alpha), bits_of(beta)};
  auto it = made.find(key);
  if (it == made.end()) {
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops sum;
      sum.append_sum(beta);
      attr.set_post_ops(sum);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, ctx.engine);
    it = made.emplace(key, dnnl::matmul(pd)).first;
  }
  dnnl::memory am(a_md, ctx.engine, const_cast<uint16_t*>(a));
  dnnl::memory bm(b_md, ctx.engine, const_cast<uint16_t*>(b));
  dnnl::memory cm(c_md, ctx.engine, c);
  it->second.execute(ctx.stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  ctx.stream.wait();
}

}  // namespace kdp::ops_detail::onednn
