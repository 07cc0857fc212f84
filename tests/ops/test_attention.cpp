#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/native/bf16.hpp"
#include "test_util.hpp"

using namespace kdp;
using kdp::test::check_gradients;
using kdp::test::leaf;
using kdp::test::random_tensor;

namespace {

const float kInf = std::numeric_limits<float>::infinity();

// softmax(q k^T scale + mask) v per batch entry, in double, holding the whole
// score matrix (what the fused kernel must agree with).
std::vector<float> naive_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& mask, bool causal, double scale) {
  const int64_t t = q.size(-2), s = k.size(-2), d = q.size(-1), dv = v.size(-1);
  const int64_t bh = q.numel() / (t * d);
  const auto qv = q.to_vector(), kv = k.to_vector(), vv = v.to_vector();
  const std::vector<float> mv = mask.defined() ? mask.to_vector() : std::vector<float>();
  const int64_t mstride = mask.defined() && mask.numel() > t * s ? t * s : 0;
  std::vector<float> out(size_t(bh * t * dv), 0.0f);
  for (int64_t b = 0; b < bh; ++b) {
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> w(static_cast<size_t>(s));
      double top = -INFINITY;
      for (int64_t j = 0; j < s; ++j) {
        double sc = 0.0;
        for (int64_t c = 0; c < d; ++c) {
          sc += double(qv[size_t((b * t + i) * d + c)]) * kv[size_t((b * s + j) * d + c)];
        }
        sc *= scale;
        if (!mv.empty()) sc += mv[size_t(b * mstride + i * s + j)];
        if (causal && j > i) sc = -INFINITY;
        w[size_t(j)] = sc;
        top = std::max(top, sc);
      }
      if (top == -INFINITY) continue;  // every key masked out: zeros
      double total = 0.0;
      for (double& x : w) total += (x = std::exp(x - top));
      for (int64_t e = 0; e < dv; ++e) {
        double acc = 0.0;
        for (int64_t j = 0; j < s; ++j) {
          acc += w[size_t(j)] / total * vv[size_t((b * s + j) * dv + e)];
        }
        out[size_t((b * t + i) * dv + e)] = float(acc);
      }
    }
  }
  return out;
}

// A mask of 0 and -inf (about a quarter of the keys out, but never a whole row).
Tensor random_mask(const Shape& shape, uint64_t seed) {
  std::vector<float> m = test::random_values(shape.numel(), seed, 0.0f, 1.0f);
  const int64_t s = shape[shape.rank() - 1];
  for (size_t i = 0; i < m.size(); ++i) m[i] = (m[i] < 0.25f && i % size_t(s) != 0) ? -kInf : 0.0f;
  return Tensor::from_host(m, shape);
}

}  // namespace

// Sequences that the key blocks (32) do not tile, with and without the causal
// mask, an additive mask shared or per batch entry, and another scale.
TEST(Attention, ForwardIsSoftmaxOfTheScoresTimesTheValues) {
  const Tensor q = random_tensor({2, 3, 37, 8}, 61, -2.0f, 2.0f);
  const Tensor k = random_tensor({2, 3, 45, 8}, 62, -2.0f, 2.0f);
  const Tensor v = random_tensor({2, 3, 45, 5}, 63);
  const double scale = 1.0 / std::sqrt(8.0);
  const Tensor shared = random_mask({37, 45}, 64);
  const Tensor per_batch = random_mask({2, 3, 37, 45}, 65);
  for (bool causal : {false, true}) {
    for (const Tensor& mask : {Tensor(), shared, per_batch}) {
      AttentionOptions o;
      o.is_causal = causal;
      o.attn_mask = mask;
      const Tensor out = scaled_dot_product_attention(q, k, v, o);
      ASSERT_EQ(out.shape(), (Shape{2, 3, 37, 5}));
      test::expect_close(
          out.to_vector(), naive_attention(q, k, v, mask, causal, scale), 2e-5, 1e-4,
          fmt::format("causal {} mask {}", causal, mask.defined() ? mask.shape().str() : "none"));
    }
  }
  AttentionOptions scaled;
  scaled.scale = 0.3;
  test::expect_close(scaled_dot_product_attention(q, k, v, scaled).to_vector(),
                     naive_attention(q, k, v, Tensor(), false, 0.3), 2e-5, 1e-4, "scale 0.3");
}

// Queries in one block of the host path (5) and in two (130: 128 and 2,
// the key and value gradients summed over both).
TEST(Attention, GradientsMatchFiniteDifferences) {
  for (const auto& [t, s] : {std::pair<int64_t, int64_t>{5, 7}, {130, 80}}) {
    Tensor q = leaf(random_tensor({2, t, 4}, 66));
    Tensor k = leaf(random_tensor({2, s, 4}, 67));
    Tensor v = leaf(random_tensor({2, s, 3}, 68));
    for (bool causal : {false, true}) {
      AttentionOptions o;
      o.is_causal = causal;
      o.attn_mask = random_mask({t, s}, 69);
      check_gradients(
          [&](const std::vector<Tensor>& in) {
            return scaled_dot_product_attention(in[0], in[1], in[2], o);
          },
          {q, k, v}, {},
          fmt::format("{}attention, {} queries, {} keys", causal ? "causal " : "", t, s));
    }
  }
}

// With dropout, forward and backward draw the same mask: finite differences
// of a forward that starts from the same generator state each time agree with
// the backward of one of them. Half the weights go, so a backward that drew
// another mask would be far off.
TEST(Attention, DropoutReplaysItsMaskInBackward) {
  Generator& gen = get_default_device().generator();
  const uint64_t seed = gen.seed(), offset = gen.offset();
  AttentionOptions o;
  o.dropout_p = 0.5f;
  o.is_causal = true;
  // Queries in one block and in two (the host path's blocks of 128).
  for (const int64_t t : {6, 130}) {
    Tensor q = leaf(random_tensor({1, 2, t, 4}, 70));
    Tensor k = leaf(random_tensor({1, 2, t, 4}, 71));
    Tensor v = leaf(random_tensor({1, 2, t, 3}, 72));
    check_gradients(
        [&](const std::vector<Tensor>& in) {
          gen.set_state(seed, offset);
          return scaled_dot_product_attention(in[0], in[1], in[2], o);
        },
        {q, k, v}, {}, fmt::format("attention with dropout, {} tokens", t));
  }
  Tensor q = leaf(random_tensor({1, 2, 6, 4}, 70));
  Tensor k = leaf(random_tensor({1, 2, 6, 4}, 71));
  Tensor v = leaf(random_tensor({1, 2, 6, 3}, 72));
  gen.set_state(seed, offset);
  const auto a = scaled_dot_product_attention(q, k, v, o).to_vector();
  const auto b = scaled_dot_product_attention(q, k, v, o).to_vector();
  EXPECT_NE(a, b) << "the next call draws another mask";
  AttentionOptions none = o;
  none.dropout_p = 0.0f;
  EXPECT_NE(a, scaled_dot_product_attention(q, k, v, none).to_vector()) << "nothing dropped";
}

// The factor of weight (b, i, j) is the device stream's draw for counter
// offset + (b T + i) S + j against p, as Problem::kept defines it: with equal
// scores and one-hot values, out[b, i, j] is that factor over S. 67 keys: two
// key blocks, and rows starting at odd and even counters.
TEST(Attention, DropoutFactorsAreTheDevicesDraws) {
  const int64_t bh = 2, t = 5, s = 67;
  std::vector<float> eye(static_cast<size_t>(bh * s * s), 0.0f);
  for (int64_t b = 0; b < bh; ++b) {
    for (int64_t j = 0; j < s; ++j) eye[static_cast<size_t>((b * s + j) * s + j)] = 1.0f;
  }
  const Tensor q = Tensor::zeros({bh, t, 4}), k = Tensor::zeros({bh, s, 4});
  const Tensor v = Tensor::from_host(eye, {bh, s, s});
  AttentionOptions o;
  o.dropout_p = 0.3f;
  Generator& gen = get_default_device().generator();
  const uint64_t seed = gen.seed(), offset = gen.offset();
  const std::vector<float> out = scaled_dot_product_attention(q, k, v, o).to_vector();
  const random::Stream stream(seed);
  const uint32_t threshold = random::uniform_threshold(0.3f);
  const float keep_scale = 1.0f / (1.0f - 0.3f), inv = 1.0f / static_cast<float>(s);
  int64_t kept = 0;
  for (int64_t b = 0; b < bh; ++b) {
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = 0; j < s; ++j) {
        const uint64_t counter = offset + static_cast<uint64_t>((b * t + i) * s + j);
        const bool keep = stream.draw24(counter) >= threshold;
        kept += keep ? 1 : 0;
        ASSERT_EQ(out[static_cast<size_t>((b * t + i) * s + j)], keep ? keep_scale * inv : 0.0f)
            << "b " << b << " i " << i << " j " << j;
      }
    }
  }
  EXPECT_GT(kept, bh * t * s / 2);  // about 70 % kept
  EXPECT_LT(kept, bh * t * s * 9 / 10);
}

// Under SampleDraws a batch entry's mask is its own: the same whichever batch
// it is in.
TEST(Attention, DropoutPerSampleIsTheSameInAnyBatch) {
  const Tensor q = random_tensor({3, 2, 5, 4}, 73);
  const Tensor k = random_tensor({3, 2, 5, 4}, 74);
  const Tensor v = random_tensor({3, 2, 5, 3}, 75);
  AttentionOptions o;
  o.dropout_p = 0.3f;
  std::vector<float> whole, alone;
  {
    SampleDraws draws(9, {10, 11, 12});
    whole = scaled_dot_product_attention(q, k, v, o).to_vector();
  }
  {
    SampleDraws draws(9, {11});
    alone = scaled_dot_product_attention(q.slice(0, 1, 2), k.slice(0, 1, 2), v.slice(0, 1, 2), o)
                .to_vector();
  }
  EXPECT_EQ(alone, std::vector<float>(whole.begin() + 30, whole.begin() + 60));
}

namespace {

// out, then the gradients of q, k and v of sum(out^2), in `precision`.
std::vector<float> attention_bits(Tensor q, Tensor k, Tensor v, const AttentionOptions& o,
                                  Precision precision) {
  for (Tensor* x : {&q, &k, &v}) x->set_grad(Tensor());
  Tensor out;
  {
    autocast guard(precision);
    out = scaled_dot_product_attention(q, k, v, o);
  }
  sum(out * out).backward();
  std::vector<float> all = out.to_vector();
  for (const Tensor* x : {&q, &k, &v}) {
    const auto g = x->grad().to_vector();
    all.insert(all.end(), g.begin(), g.end());
  }
  return all;
}

}  // namespace

// A head is one thread's work, each of its sums in one order, so the bits do
// not depend on how many threads there are (140 queries: two blocks).
TEST(Attention, TheSameBitsAtEveryThreadCount) {
  const Tensor q = leaf(random_tensor({4, 2, 140, 16}, 76));
  const Tensor k = leaf(random_tensor({4, 2, 140, 16}, 77));
  const Tensor v = leaf(random_tensor({4, 2, 140, 16}, 78));
  AttentionOptions o;
  o.is_causal = true;
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2, 3}) {
    ScopedBlasThreads scoped(threads);
    runs.push_back(attention_bits(q, k, v, o, Precision::fp32));
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

TEST(Attention, ARowWithEveryKeyMaskedOutGetsZerosAndNoGradient) {
  Tensor q = leaf(random_tensor({2, 3}, 79));
  Tensor k = leaf(random_tensor({4, 3}, 80));
  Tensor v = leaf(random_tensor({4, 2}, 81));
  std::vector<float> m(8, 0.0f);
  for (int j = 0; j < 4; ++j) m[size_t(4 + j)] = -kInf;  // row 1 sees no key
  AttentionOptions o;
  o.attn_mask = Tensor::from_host(m, {2, 4});
  const Tensor out = scaled_dot_product_attention(q, k, v, o);
  const auto ov = out.to_vector();
  EXPECT_EQ(ov[2], 0.0f);
  EXPECT_EQ(ov[3], 0.0f);
  sum(out).backward();
  const auto gq = q.grad().to_vector();
  EXPECT_EQ(gq[3], 0.0f);
  for (const Tensor* t : {&q, &k, &v}) {
    for (float g : t->grad().to_vector()) EXPECT_TRUE(std::isfinite(g));
  }
}

// No keys at all (S = 0): every query gets zeros, and no gradient flows.
TEST(Attention, NoKeysGiveZeros) {
  Tensor q = leaf(random_tensor({1, 2, 3, 4}, 82));
  Tensor k = leaf(Tensor::zeros({1, 2, 0, 4}));
  Tensor v = leaf(Tensor::zeros({1, 2, 0, 5}));
  const Tensor out = scaled_dot_product_attention(q, k, v);
  ASSERT_EQ(out.shape(), (Shape{1, 2, 3, 5}));
  for (float x : out.to_vector()) EXPECT_EQ(x, 0.0f);
  sum(out).backward();
  for (float g : q.grad().to_vector()) EXPECT_EQ(g, 0.0f);
}

TEST(Attention, BadArgumentsAreNamed) {
  const Tensor q = Tensor::zeros({2, 5, 4});
  try {
    scaled_dot_product_attention(q, Tensor::zeros({2, 6, 3}), Tensor::zeros({2, 6, 3}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[2, 5, 4]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 6, 3]"), std::string::npos) << msg;
  }
  const Tensor k = Tensor::zeros({2, 6, 4});
  EXPECT_THROW(scaled_dot_product_attention(q, k, Tensor::zeros({2, 5, 4})), ShapeError);
  EXPECT_THROW(scaled_dot_product_attention(q, Tensor::zeros({3, 6, 4}), Tensor::zeros({3, 6, 4})),
               ShapeError);
  AttentionOptions bad_mask;
  bad_mask.attn_mask = Tensor::zeros({6, 5});
  EXPECT_THROW(scaled_dot_product_attention(q, k, k, bad_mask), ShapeError);
  AttentionOptions bad_p;
  bad_p.dropout_p = 1.0f;
  EXPECT_THROW(scaled_dot_product_attention(q, k, k, bad_p), ValueError);
  EXPECT_THROW(scaled_dot_product_attention(Tensor::zeros({1, 2, 300}), Tensor::zeros({1, 2, 300}),
                                            Tensor::zeros({1, 2, 300})),
               ShapeError);
}

namespace {

// Attention in double on operands rounded to bf16, with dropout's factors
// (the device stream's draws, as Problem::kept defines them), and for every
// result the sum of the magnitudes of its terms: a product whose operands
// (the weights, dS) are rounded once more to bf16 is off by at most
// u = 2^-8 of that sum, plus fp32's rounding of the sums.
struct Bf16Reference {
  std::vector<double> out, dq, dk, dv;          // values
  std::vector<double> out_m, dq_m, dk_m, dv_m;  // sums of |terms|
};

float bf16(float x) {
  return kdp::detail::round_to_bf16(x);
}

Bf16Reference bf16_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& gy,
                             const Tensor& mask, bool causal, float p, uint64_t seed,
                             uint64_t offset) {
  const int64_t t = q.size(-2), s = k.size(-2), d = q.size(-1), dv = v.size(-1);
  const int64_t bh = q.numel() / (t * d);
  auto rounded = [](const Tensor& x) {
    std::vector<double> r;
    for (float f : x.to_vector()) r.push_back(bf16(f));
    return r;
  };
  const auto qv = rounded(q), kv = rounded(k), vv = rounded(v), gv = rounded(gy);
  const std::vector<float> mv = mask.defined() ? mask.to_vector() : std::vector<float>();
  const random::Stream stream(seed);
  const uint32_t threshold = random::uniform_threshold(p);
  const double keep_scale = 1.0 / (1.0 - p), scale = 1.0 / std::sqrt(double(d));
  Bf16Reference r;
  for (auto* x : {&r.out, &r.out_m, &r.dq, &r.dq_m}) x->assign(size_t(bh * t * dv), 0.0);
  r.dq.assign(size_t(bh * t * d), 0.0);
  r.dq_m.assign(r.dq.size(), 0.0);
  r.dk.assign(size_t(bh * s * d), 0.0);
  r.dk_m.assign(r.dk.size(), 0.0);
  r.dv.assign(size_t(bh * s * dv), 0.0);
  r.dv_m.assign(r.dv.size(), 0.0);
  for (int64_t b = 0; b < bh; ++b) {
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> w(static_cast<size_t>(s)), keep(static_cast<size_t>(s), 1.0);
      double top = -INFINITY;
      for (int64_t j = 0; j < s; ++j) {
        double sc = 0.0;
        for (int64_t c = 0; c < d; ++c)
          sc += qv[size_t((b * t + i) * d + c)] * kv[size_t((b * s + j) * d + c)];
        sc = sc * scale + (mv.empty() ? 0.0 : mv[size_t(i * s + j)]);
        if (causal && j > i) sc = -INFINITY;
        w[size_t(j)] = sc;
        top = std::max(top, sc);
        if (p > 0.0f) {
          const uint64_t counter = offset + static_cast<uint64_t>((b * t + i) * s + j);
          keep[size_t(j)] = stream.draw24(counter) >= threshold ? keep_scale : 0.0;
        }
      }
      double total = 0.0;
      for (double& x : w) total += (x = std::exp(x - top));
      for (double& x : w) x /= total;
      const size_t row = size_t(b * t + i);
      double delta = 0.0, delta_m = 0.0;
      for (int64_t e = 0; e < dv; ++e) {
        double acc = 0.0, mag = 0.0;
        for (int64_t j = 0; j < s; ++j) {
          const double term = w[size_t(j)] * keep[size_t(j)] * vv[size_t((b * s + j) * dv + e)];
          acc += term;
          mag += std::abs(term);
        }
        r.out[row * size_t(dv) + size_t(e)] = acc;
        r.out_m[row * size_t(dv) + size_t(e)] = mag;
        delta += gv[row * size_t(dv) + size_t(e)] * acc;
        delta_m += std::abs(gv[row * size_t(dv) + size_t(e)]) * mag;
      }
      for (int64_t j = 0; j < s; ++j) {
        double dpj = 0.0, dpm = 0.0;
        for (int64_t e = 0; e < dv; ++e) {
          const double term = gv[row * size_t(dv) + size_t(e)] * vv[size_t((b * s + j) * dv + e)];
          dpj += term;
          dpm += std::abs(term);
        }
        const double pj = w[size_t(j)], kj = keep[size_t(j)];
        const double ds = pj * (dpj * kj - delta), ds_m = pj * (dpm * kj + delta_m);
        for (int64_t e = 0; e < dv; ++e) {
          const double term = pj * kj * gv[row * size_t(dv) + size_t(e)];
          r.dv[size_t((b * s + j) * dv + e)] += term;
          r.dv_m[size_t((b * s + j) * dv + e)] += std::abs(term);
        }
        for (int64_t c = 0; c < d; ++c) {
          const double kc = kv[size_t((b * s + j) * d + c)], qc = qv[row * size_t(d) + size_t(c)];
          r.dq[row * size_t(d) + size_t(c)] += scale * ds * kc;
          r.dq_m[row * size_t(d) + size_t(c)] += scale * ds_m * std::abs(kc);
          r.dk[size_t((b * s + j) * d + c)] += scale * ds * qc;
          r.dk_m[size_t((b * s + j) * d + c)] += scale * ds_m * std::abs(qc);
        }
      }
    }
  }
  return r;
}

void expect_within(const std::vector<float>& got, const std::vector<double>& want,
                   const std::vector<double>& magnitude, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double u = std::ldexp(1.0, -8);
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double tol = 3.0 * u * magnitude[i] + 1e-6;
    if (std::abs(double(got[i]) - want[i]) > tol) {
      ADD_FAILURE() << what << " [" << i << "]: " << got[i] << " against " << want[i]
                    << " (tolerance " << tol << ")";
      ++bad;
    }
  }
}

}  // namespace

// Under bf16 autocast the products take bf16 operands and sum in fp32: kdp's
// result is the attention of the rounded operands, off by one more bf16
// rounding of the weights and of dS. 150 queries: a whole block of the bf16
// path and part of a second; 150 keys (that path) and 40 (the fp32 kernels
// on rounded operands); with and without the causal mask, an additive mask
// and dropout.
TEST(Attention, Bf16AutocastIsTheAttentionOfTheRoundedOperands) {
  Generator& gen = get_default_device().generator();
  for (const int64_t s : {150, 40}) {
    for (const auto& [causal, masked, p] : {std::tuple<bool, bool, float>{false, false, 0.0f},
                                            {true, false, 0.0f},
                                            {false, true, 0.2f},
                                            {true, true, 0.2f}}) {
      if (causal && s != 150) continue;  // causal needs S >= T here
      const int64_t t = causal ? s : 150;
      Tensor q = leaf(random_tensor({2, 2, t, 16}, 90, -2.0f, 2.0f));
      Tensor k = leaf(random_tensor({2, 2, s, 16}, 91, -2.0f, 2.0f));
      Tensor v = leaf(random_tensor({2, 2, s, 8}, 92));
      const Tensor gy = random_tensor({2, 2, t, 8}, 93);
      AttentionOptions o;
      o.is_causal = causal;
      o.dropout_p = p;
      if (masked) o.attn_mask = random_mask({t, s}, 94);
      const uint64_t seed = gen.seed(), offset = gen.offset();
      Tensor out;
      {
        autocast bf16(Precision::bf16);
        out = scaled_dot_product_attention(q, k, v, o);
      }
      out.backward(gy);
      const Bf16Reference r = bf16_reference(q, k, v, gy, o.attn_mask, causal, p, seed, offset);
      const std::string what =
          fmt::format("S {} causal {} mask {} dropout {}", s, causal, masked, p);
      expect_within(out.to_vector(), r.out, r.out_m, "out, " + what);
      expect_within(q.grad().to_vector(), r.dq, r.dq_m, "dq, " + what);
      expect_within(k.grad().to_vector(), r.dk, r.dk_m, "dk, " + what);
      expect_within(v.grad().to_vector(), r.dv, r.dv_m, "dv, " + what);
      // Not fp32's result: the operands were rounded.
      const Tensor fp32 = scaled_dot_product_attention(q.detach(), k.detach(), v.detach());
      if (!causal && !masked && p == 0.0f) {
        EXPECT_NE(out.to_vector(), fp32.to_vector()) << what;
      }
    }
  }
}

// bf16's bits depend on neither the thread count nor the other heads of the
// batch: a head is one thread's work, each product on that thread.
TEST(Attention, Bf16TheSameBitsAtEveryThreadCountAndBatch) {
  const Tensor q = leaf(random_tensor({3, 2, 140, 16}, 95));
  const Tensor k = leaf(random_tensor({3, 2, 140, 16}, 96));
  const Tensor v = leaf(random_tensor({3, 2, 140, 16}, 97));
  AttentionOptions o;
  o.is_causal = true;
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2, 3}) {
    ScopedBlasThreads scoped(threads);
    runs.push_back(attention_bits(q, k, v, o, Precision::bf16));
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
  // The last batch entry alone: its output and gradients are the whole
  // batch's last third of each.
  const std::vector<float> alone =
      attention_bits(leaf(q.detach().slice(0, 2, 3)), leaf(k.detach().slice(0, 2, 3)),
                     leaf(v.detach().slice(0, 2, 3)), o, Precision::bf16);
  const size_t part = alone.size() / 4, whole = runs[0].size() / 4;
  for (size_t x = 0; x < 4; ++x) {
    EXPECT_TRUE(std::equal(alone.begin() + long(x * part), alone.begin() + long((x + 1) * part),
                           runs[0].begin() + long(x * whole + 2 * part)))
        << "part " << x;
  }
}
