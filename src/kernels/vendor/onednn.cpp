// kdp's calls into oneDNN (2.x API). Primitives are made once per shape and
// kept (making one compiles its kernel), per calling thread with the thread's
// own engine and stream; every call runs with kdp's thread count and within
// the instruction sets cpu_isa() allows.
#include <dlfcn.h>
#include <fmt/format.h>

#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>

#include "core/check.hpp"
#include "core/cpu_isa.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/threads.hpp"
#include "kernels/vendor/onednn.hpp"

static_assert(DNNL_VERSION_MAJOR == 2, "kdp's oneDNN calls are written for oneDNN 2.x");

namespace kdp::detail::onednn {

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
// OpenMP setting: `threads`, or kdp's share of the cores (the BLAS's count)
// where it is 0, looked up at run time since kdp itself does not link OpenMP.
void use_threads(int threads) {
  using SetThreads = void (*)(int);
  static const auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  thread_local int applied = 0;
  if (threads <= 0) threads = blas_threads();
  if (set != nullptr && threads != applied) {
    set(threads);
    applied = threads;
  }
}

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

Context& context(int threads = 0) {
  cap_instruction_sets();
  thread_local Context c;
  use_threads(threads);
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

// Runs a call into oneDNN; its errors become kdp's, naming the call and the
// shape (`shape()` is asked only then).
template <class Shape, class F>
void guarded(const char* what, const Shape& shape, F&& call) {
  try {
    call();
  } catch (const dnnl::error& e) {
    KDP_FAIL(DeviceError, "{} {} failed: {} (status {})", what, shape(), e.what(),
             static_cast<int>(e.status));
  }
}

// "input [n, c, h, w], weight [o, c, kh, kw]" for messages.
std::string shape_of(const ConvGeometry& d) {
  if (d.volume) {
    return fmt::format("of input [{}, {}, {}, {}, {}] and weight [{}, {}, {}, {}, {}]", d.n, d.c,
                       d.d, d.h, d.w, d.o, d.c, d.kd, d.kh, d.kw);
  }
  return fmt::format("of input [{}, {}, {}, {}] and weight [{}, {}, {}, {}]", d.n, d.c, d.h, d.w,
                     d.o, d.c, d.kh, d.kw);
}

}  // namespace

bool available() {
  return true;
}

bool supports_bf16() {
  return detail::cpu_isa() >= detail::CpuIsa::Avx512;
}

void matmul_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                 float* c, int64_t ldc, int threads) {
  guarded(
      "bf16 matmul", [&] { return fmt::format("{}x{}x{}", m, n, k); },
      [&] {
        Context& ctx = context(threads);
        const dnnl::memory::desc a_md({m, k}, dt::bf16, strides(trans_a, lda));
        const dnnl::memory::desc b_md({k, n}, dt::bf16, strides(trans_b, ldb));
        const dnnl::memory::desc c_md({m, n}, dt::f32, dims{ldc, 1});
        thread_local std::map<MatmulKey, dnnl::matmul> made;
        const MatmulKey key{trans_a,        trans_b,      m, n, k, lda, ldb, ldc,
                            bits_of(alpha), bits_of(beta)};
        auto it = made.find(key);
        if (it == made.end()) {
          dnnl::primitive_attr attr;
          if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
          if (beta != 0.0f) {
            dnnl::post_ops sum;
            sum.append_sum(beta);
            attr.set_post_ops(sum);
          }
          const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr,
                                                ctx.engine);
          it = made.emplace(key, dnnl::matmul(pd)).first;
        }
        dnnl::memory am(a_md, ctx.engine, const_cast<uint16_t*>(a));
        dnnl::memory bm(b_md, ctx.engine, const_cast<uint16_t*>(b));
        dnnl::memory cm(c_md, ctx.engine, c);
        it->second.execute(ctx.stream,
                           {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
        ctx.stream.wait();
      });
}

namespace {

using tag = dnnl::memory::format_tag;

// The padding on the far side of each spatial dimension that gives PyTorch's
// output size (floor division may leave less than the near side's).
int64_t far_padding(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation,
                    int64_t out) {
  return (out - 1) * stride + (k - 1) * dilation + 1 - in - pad;
}

// The descriptors of one convolution shape in one precision: PyTorch's
// layouts (NCHW, OIHW) for the user's tensors, "any" for oneDNN's choice.
struct ConvDescs {
  dnnl::memory::desc x_user, w_user, y_user, bias_user;
  dnnl::memory::desc x_any, w_any, y_any, gy_any, gx_any, gw_any;
  dims strides, dilation, pad_l, pad_r;
};

ConvDescs descs_of(const ConvGeometry& d, bool bf16) {
  const dt in = bf16 ? dt::bf16 : dt::f32;
  dims x{d.n, d.c}, w{d.o, d.c}, y{d.n, d.o}, strides, dilation, pad_l, pad_r;
  // The spatial dimensions: depth (volumes), height, width.
  auto add = [&](int64_t in_size, int64_t k, int64_t out, int64_t s, int64_t p, int64_t dl) {
    x.push_back(in_size);
    w.push_back(k);
    y.push_back(out);
    strides.push_back(s);
    dilation.push_back(dl - 1);
    pad_l.push_back(p);
    pad_r.push_back(far_padding(in_size, k, s, p, dl, out));
  };
  if (d.volume) add(d.d, d.kd, d.od, d.sd, d.pd, d.dd);
  add(d.h, d.kh, d.oh, d.sh, d.ph, d.dh);
  add(d.w, d.kw, d.ow, d.sw, d.pw, d.dw);
  const tag act = d.volume ? tag::ncdhw : tag::nchw, weights = d.volume ? tag::oidhw : tag::oihw;
  return {dnnl::memory::desc(x, dt::f32, act),
          dnnl::memory::desc(w, dt::f32, weights),
          dnnl::memory::desc(y, dt::f32, act),
          dnnl::memory::desc({d.o}, dt::f32, tag::x),
          dnnl::memory::desc(x, in, tag::any),
          dnnl::memory::desc(w, in, tag::any),
          dnnl::memory::desc(y, dt::f32, tag::any),
          dnnl::memory::desc(y, in, tag::any),
          dnnl::memory::desc(x, dt::f32, tag::any),
          dnnl::memory::desc(w, dt::f32, tag::any),
          strides,
          dilation,
          pad_l,
          pad_r};
}

constexpr auto kDirect = dnnl::algorithm::convolution_direct;

dnnl::convolution_forward::primitive_desc forward_pd(const ConvDescs& c, bool relu, bool bias,
                                                     const dnnl::engine& engine) {
  dnnl::primitive_attr attr;
  if (relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  const auto training = dnnl::prop_kind::forward_training;
  const auto desc =
      bias ? dnnl::convolution_forward::desc(training, kDirect, c.x_any, c.w_any, c.bias_user,
                                             c.y_any, c.strides, c.dilation, c.pad_l, c.pad_r)
           : dnnl::convolution_forward::desc(training, kDirect, c.x_any, c.w_any, c.y_any,
                                             c.strides, c.dilation, c.pad_l, c.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, attr, engine);
}

// Memory in oneDNN's layouts for one role of one cached primitive (its
// reordered input, or its output before the reorder to the user's layout):
// allocated on first use and kept, so a steady training step allocates none.
// Calls finish before they return, so one per role and thread is enough.
class Scratch {
 public:
  dnnl::memory& operator()(const dnnl::memory::desc& md, const dnnl::engine& engine) {
    if (!memory_ || memory_.get_desc() != md) memory_ = dnnl::memory(md, engine);
    return memory_;
  }

 private:
  dnnl::memory memory_;
};

// The forward of one shape, precision, activation and bias.
struct ConvForward {
  ConvDescs descs;
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  Scratch x, w, y;
  // conv_kept_input_bytes' answer, decided on its first call (-1: not yet).
  int64_t kept_input_bytes = -1;
};

// The backward of one shape and precision (the bias gradient is kdp's).
struct ConvBackward {
  ConvDescs descs;
  dnnl::convolution_backward_data::primitive_desc data_pd;
  dnnl::convolution_backward_weights::primitive_desc weights_pd;
  dnnl::convolution_backward_data data;
  dnnl::convolution_backward_weights weights;
  Scratch gy_data, w, gx, x, gy_weights, gw;
};

// Every size of a convolution (a volume's depth ones too), its precision,
// activation and bias.
using ConvKey = std::tuple<std::array<int64_t, 19>, bool, bool, bool>;

ConvKey key_of(const ConvGeometry& d, bool bf16, bool relu, bool bias) {
  return {{d.n, d.c, d.h, d.w, d.o, d.kh, d.kw, d.sh, d.sw, d.ph, d.pw, d.dh, d.dw, d.d, d.kd, d.sd,
           d.pd, d.dd, d.volume ? 1 : 0},
          bf16,
          relu,
          bias};
}

ConvForward& forward_for(const ConvGeometry& d, bool bf16, bool relu, bool bias, Context& ctx) {
  thread_local std::map<ConvKey, ConvForward> made;
  const ConvKey key = key_of(d, bf16, relu, bias);
  auto it = made.find(key);
  if (it == made.end()) {
    ConvDescs descs = descs_of(d, bf16);
    auto pd = forward_pd(descs, relu, bias, ctx.engine);
    it = made.emplace(key, ConvForward{descs, pd, dnnl::convolution_forward(pd), {}, {}, {}, -1})
             .first;
  }
  return it->second;
}

ConvBackward& backward_for(const ConvGeometry& d, bool bf16, Context& ctx) {
  thread_local std::map<ConvKey, ConvBackward> made;
  const ConvKey key = key_of(d, bf16, false, false);
  auto it = made.find(key);
  if (it == made.end()) {
    const ConvDescs c = descs_of(d, bf16);
    const auto hint = forward_pd(c, false, false, ctx.engine);
    const dnnl::convolution_backward_data::primitive_desc data_pd(
        dnnl::convolution_backward_data::desc(kDirect, c.gx_any, c.w_any, c.gy_any, c.strides,
                                              c.dilation, c.pad_l, c.pad_r),
        ctx.engine, hint);
    const dnnl::convolution_backward_weights::primitive_desc weights_pd(
        dnnl::convolution_backward_weights::desc(kDirect, c.x_any, c.gw_any, c.gy_any, c.strides,
                                                 c.dilation, c.pad_l, c.pad_r),
        ctx.engine, hint);
    it = made.emplace(key, ConvBackward{c,
                                        data_pd,
                                        weights_pd,
                                        dnnl::convolution_backward_data(data_pd),
                                        dnnl::convolution_backward_weights(weights_pd),
                                        {},
                                        {},
                                        {},
                                        {},
                                        {},
                                        {}})
             .first;
  }
  return it->second;
}

// The user's memory in the layout `wanted`: itself when the layouts agree,
// else its copy reordered into `scratch` (what oneDNN's kernels read).
dnnl::memory in_layout(const dnnl::memory& user, const dnnl::memory::desc& wanted, Scratch& scratch,
                       Context& ctx) {
  if (user.get_desc() == wanted) return user;
  dnnl::memory& out = scratch(wanted, ctx.engine);
  dnnl::reorder(user, out).execute(ctx.stream, const_cast<dnnl::memory&>(user), out);
  return out;
}

dnnl::memory user_memory(const dnnl::memory::desc& md, const float* p, Context& ctx) {
  return dnnl::memory(md, ctx.engine, const_cast<float*>(p));
}

// Writes `result` (in oneDNN's layout) into the user's memory, when they differ.
void to_user(dnnl::memory& result, dnnl::memory& user, Context& ctx) {
  if (result.get_desc() != user.get_desc())
    dnnl::reorder(result, user).execute(ctx.stream, result, user);
}

// Where a primitive writes: the user's memory in its layout, else `scratch`.
dnnl::memory for_output(const dnnl::memory& user, const dnnl::memory::desc& wanted,
                        Scratch& scratch, Context& ctx) {
  return user.get_desc() == wanted ? user : scratch(wanted, ctx.engine);
}

}  // namespace

bool conv_supported(const ConvGeometry& d) {
  return d.groups == 1 && far_padding(d.h, d.kh, d.sh, d.ph, d.dh, d.oh) >= 0 &&
         far_padding(d.w, d.kw, d.sw, d.pw, d.dw, d.ow) >= 0 &&
         far_padding(d.d, d.kd, d.sd, d.pd, d.dd, d.od) >= 0 && d.n > 0;
}

size_t conv_kept_input_bytes(const ConvGeometry& d, bool bf16, bool relu, bool bias) {
  size_t bytes = 0;
  guarded(
      "convolution forward", [&] { return shape_of(d); },
      [&] {
        Context& ctx = context();
        ConvForward& f = forward_for(d, bf16, relu, bias, ctx);
        if (f.kept_input_bytes < 0) {  // once per shape: every training step asks
          const dnnl::memory::desc fwd = f.pd.src_desc();
          const dnnl::memory::desc bwd = backward_for(d, bf16, ctx).weights_pd.src_desc();
          f.kept_input_bytes =
              fwd != f.descs.x_user && fwd == bwd ? static_cast<int64_t>(fwd.get_size()) : 0;
        }
        bytes = static_cast<size_t>(f.kept_input_bytes);
      });
  return bytes;
}

void conv_forward(const ConvGeometry& d, bool bf16, bool relu, const float* x, const float* w,
                  const float* bias, float* y, void* keep_x) {
  guarded(
      "convolution forward", [&] { return shape_of(d); },
      [&] {
        Context& ctx = context();
        ConvForward& c = forward_for(d, bf16, relu, bias != nullptr, ctx);
        dnnl::memory x_user = user_memory(c.descs.x_user, x, ctx);
        dnnl::memory xm;
        if (keep_x != nullptr) {  // reordered where the backward will read it again
          xm = dnnl::memory(c.pd.src_desc(), ctx.engine, keep_x);
          dnnl::reorder(x_user, xm).execute(ctx.stream, x_user, xm);
        } else {
          xm = in_layout(x_user, c.pd.src_desc(), c.x, ctx);
        }
        dnnl::memory wm =
            in_layout(user_memory(c.descs.w_user, w, ctx), c.pd.weights_desc(), c.w, ctx);
        dnnl::memory y_user = user_memory(c.descs.y_user, y, ctx);
        dnnl::memory ym = for_output(y_user, c.pd.dst_desc(), c.y, ctx);
        std::unordered_map<int, dnnl::memory> args{
            {DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}};
        if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, user_memory(c.descs.bias_user, bias, ctx));
        c.prim.execute(ctx.stream, args);
        to_user(ym, y_user, ctx);
        ctx.stream.wait();
      });
}

void conv_backward(const ConvGeometry& d, bool bf16, const float* gy, const float* w,
                   const float* x, float* gx, float* gw, const void* kept_x) {
  guarded(
      "convolution backward", [&] { return shape_of(d); },
      [&] {
        Context& ctx = context();
        ConvBackward& c = backward_for(d, bf16, ctx);
        const dnnl::memory gy_user = user_memory(c.descs.y_user, gy, ctx);
        dnnl::memory gy_data;  // gy as the data gradient reads it, reordered once for both
        if (gx != nullptr) {
          gy_data = in_layout(gy_user, c.data_pd.diff_dst_desc(), c.gy_data, ctx);
          dnnl::memory wm =
              in_layout(user_memory(c.descs.w_user, w, ctx), c.data_pd.weights_desc(), c.w, ctx);
          dnnl::memory gx_user = user_memory(c.descs.x_user, gx, ctx);
          dnnl::memory gxm = for_output(gx_user, c.data_pd.diff_src_desc(), c.gx, ctx);
          c.data.execute(
              ctx.stream,
              {{DNNL_ARG_DIFF_DST, gy_data}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, gxm}});
          to_user(gxm, gx_user, ctx);
        }
        if (gw != nullptr) {
          const dnnl::memory::desc& wanted = c.weights_pd.diff_dst_desc();
          dnnl::memory gym = gy_data && gy_data.get_desc() == wanted
                                 ? gy_data
                                 : in_layout(gy_user, wanted, c.gy_weights, ctx);
          dnnl::memory xm = kept_x != nullptr ? dnnl::memory(c.weights_pd.src_desc(), ctx.engine,
                                                             const_cast<void*>(kept_x))
                                              : in_layout(user_memory(c.descs.x_user, x, ctx),
                                                          c.weights_pd.src_desc(), c.x, ctx);
          dnnl::memory gw_user = user_memory(c.descs.w_user, gw, ctx);
          dnnl::memory gwm = for_output(gw_user, c.weights_pd.diff_weights_desc(), c.gw, ctx);
          c.weights.execute(
              ctx.stream,
              {{DNNL_ARG_SRC, xm}, {DNNL_ARG_DIFF_DST, gym}, {DNNL_ARG_DIFF_WEIGHTS, gwm}});
          to_user(gwm, gw_user, ctx);
        }
        ctx.stream.wait();
      });
}

}  // namespace kdp::detail::onednn
