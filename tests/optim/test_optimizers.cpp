#include <gtest/gtest.h>

#include <cmath>

#include "test_util.hpp"

using namespace kdp;

namespace {

// The gradient used at step k for element i: fixed numbers so the expected
// sequence can be written out by hand below.
double grad_at(int k, size_t i) {
  return 0.5 * std::cos(1.0 + k + 2.0 * static_cast<double>(i));
}

const std::vector<double> kStart = {0.3, -1.2, 2.0};

// Runs `steps` updates with the gradients above and returns the parameters.
std::vector<float> run(optim::Optimizer& opt, Tensor& p, int steps) {
  for (int k = 0; k < steps; ++k) {
    std::vector<float> g(kStart.size());
    for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(grad_at(k, i));
    p.set_grad(Tensor::from_host(g, p.shape()));
    opt.step();
  }
  return p.to_vector();
}

Tensor start() {
  std::vector<float> v(kStart.begin(), kStart.end());
  return Tensor::from_host(v, {3}).requires_grad_();
}

void expect_matches(const std::vector<float>& got, const std::vector<double>& want) {
  // float32 updates against a double reference: a few ulps per step over 6 steps.
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i])));
}

}  // namespace

TEST(SGD, PlainMomentumDampeningNesterovWeightDecay) {
  struct Case {
    double lr, momentum, dampening, wd;
    bool nesterov;
  };
  for (const Case c :
       {Case{0.1, 0, 0, 0, false}, Case{0.1, 0.9, 0, 0, false}, Case{0.05, 0.8, 0.3, 0, false},
        Case{0.05, 0.9, 0, 0.01, true}, Case{0.2, 0, 0, 0.1, false}}) {
    Tensor p = start();
    optim::SGDOptions o{c.lr, c.momentum, c.dampening, c.wd, c.nesterov};
    optim::SGD opt({{"p", p}}, o);
    const auto got = run(opt, p, 6);

    std::vector<double> want = kStart, buf(3, 0.0);
    for (int k = 0; k < 6; ++k) {
      for (size_t i = 0; i < 3; ++i) {
        double g = grad_at(k, i) + c.wd * want[i];
        if (c.momentum != 0) {
          buf[i] = k == 0 ? g : c.momentum * buf[i] + (1 - c.dampening) * g;
          g = c.nesterov ? g + c.momentum * buf[i] : buf[i];
        }
        want[i] -= c.lr * g;
      }
    }
    expect_matches(got, want);
  }
}

TEST(Adam, AdamAdamWAndAmsgradFollowPyTorchsFormulas) {
  struct Case {
    bool decoupled, amsgrad;
    double wd;
  };
  for (const Case c : {Case{false, false, 0.0}, Case{false, false, 0.1}, Case{true, false, 0.1},
                       Case{false, true, 0.0}, Case{true, true, 0.05}}) {
    Tensor p = start();
    optim::AdamOptions o;
    o.lr = 0.01;
    o.beta1 = 0.8;
    o.beta2 = 0.95;
    o.eps = 1e-6;
    o.weight_decay = c.wd;
    o.amsgrad = c.amsgrad;
    std::unique_ptr<optim::Optimizer> opt;
    if (c.decoupled) {
      opt = std::make_unique<optim::AdamW>(optim::NamedParameters{{"p", p}}, o);
    } else {
      opt = std::make_unique<optim::Adam>(optim::NamedParameters{{"p", p}}, o);
    }
    const auto got = run(*opt, p, 6);

    std::vector<double> want = kStart, m(3, 0.0), v(3, 0.0), vmax(3, 0.0);
    for (int k = 0; k < 6; ++k) {
      const int t = k + 1;
      for (size_t i = 0; i < 3; ++i) {
        double g = grad_at(k, i);
        if (c.decoupled) {
          want[i] *= 1 - o.lr * c.wd;
        } else {
          g += c.wd * want[i];
        }
        m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
        v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
        vmax[i] = std::max(vmax[i], v[i]);
        const double second = c.amsgrad ? vmax[i] : v[i];
        const double denom = std::sqrt(second) / std::sqrt(1 - std::pow(o.beta2, t)) + o.eps;
        want[i] -= o.lr / (1 - std::pow(o.beta1, t)) * m[i] / denom;
      }
    }
    expect_matches(got, want);
  }
}

TEST(Adam, FirstStepMatchesTheDoubleFormulaWithPyTorchsDefaults) {
  // From zero, the first step is -lr (1 - b1) g / (1 - b1) / (sqrt((1 - b2) g^2)
  // / sqrt(1 - b2) + eps). With 1 - beta2 taken from a float-rounded beta2 it
  // was 6.6e-6 relatively too large; computed in double and rounded once it
  // is off by the float rounding of the kernel's four dependent operations
  // (at most 4 x 2^-24 = 2.4e-7).
  const std::vector<float> grads = {0.5f, -1.3f, 2e-3f, 7.7f, -0.04f, 1e-5f, 3.3e-7f, 0.3f};
  for (const bool decoupled : {false, true}) {
    Tensor p = Tensor::zeros({static_cast<int64_t>(grads.size())}).requires_grad_();
    optim::AdamOptions o;  // lr 1e-3, betas (0.9, 0.999), eps 1e-8
    std::unique_ptr<optim::Optimizer> opt;
    if (decoupled) {
      opt = std::make_unique<optim::AdamW>(optim::NamedParameters{{"p", p}}, o);
    } else {
      opt = std::make_unique<optim::Adam>(optim::NamedParameters{{"p", p}}, o);
    }
    p.set_grad(Tensor::from_host(grads, p.shape()));
    opt->step();
    const std::vector<float> got = p.to_vector();
    for (size_t i = 0; i < grads.size(); ++i) {
      const double g = grads[i];
      const double m = (1 - o.beta1) * g, v = (1 - o.beta2) * g * g;
      const double want =
          -o.lr / (1 - o.beta1) * m / (std::sqrt(v) / std::sqrt(1 - o.beta2) + o.eps);
      EXPECT_NEAR(got[i], want, 2.5e-7 * std::fabs(want)) << "gradient " << g;
    }
  }
}

TEST(Optimizer, SkipsParametersWithoutGradient) {
  Tensor a = start();
  Tensor b = start();
  optim::SGD opt({{"a", a}, {"b", b}}, optim::SGDOptions{0.1});
  a.set_grad(Tensor::ones({3}));
  opt.step();
  EXPECT_NE(a.to_vector(), b.to_vector());
  std::vector<float> s(kStart.begin(), kStart.end());
  EXPECT_EQ(b.to_vector(), s);
}

TEST(Optimizer, StateDictRestoresTheTrajectory) {
  // 3 steps, save, 3 more == 3 steps, restore into a fresh optimizer, 3 more.
  Tensor p1 = start();
  optim::Adam a1({{"p", p1}}, optim::AdamOptions{});
  run(a1, p1, 3);
  const optim::OptimizerState saved = a1.state_dict();
  const std::vector<float> mid = p1.to_vector();
  const auto straight = run(a1, p1, 3);

  Tensor p3 = Tensor::from_host(mid, {3}).requires_grad_();
  optim::Adam a3({{"p", p3}}, optim::AdamOptions{});
  a3.load_state_dict(saved);
  EXPECT_EQ(a3.state_dict().scalars.at("p").at("step"), 3.0);
  // run() replays gradients 0..2 again, as it did for a1's second half.
  EXPECT_EQ(run(a3, p3, 3), straight);  // bit-identical continuation

  optim::SGD sgd({{"p", start()}}, optim::SGDOptions{});
  EXPECT_THROW(sgd.load_state_dict(saved), ValueError);  // an Adam state into SGD
  optim::Adam other({{"q", start()}}, optim::AdamOptions{});
  EXPECT_THROW(other.load_state_dict(saved), ValueError);  // unknown parameter name
}

TEST(Optimizer, AStateViewSharesTheTensorsAStateDictCopies) {
  // state_view() (what a checkpoint writes) equals state_dict() until the next
  // step, which changes the view's tensors and not the copies.
  Tensor p = start();
  optim::Adam a({{"p", p}}, optim::AdamOptions{});
  run(a, p, 2);
  const optim::OptimizerState copy = a.state_dict(), view = a.state_view();
  EXPECT_EQ(view.scalars, copy.scalars);
  EXPECT_EQ(view.hyperparameters, copy.hyperparameters);
  for (const char* key : {"exp_avg", "exp_avg_sq"}) {
    EXPECT_EQ(view.tensors.at("p").at(key).to_vector(), copy.tensors.at("p").at(key).to_vector());
  }
  const std::vector<float> before = copy.tensors.at("p").at("exp_avg").to_vector();
  run(a, p, 1);
  EXPECT_EQ(copy.tensors.at("p").at("exp_avg").to_vector(), before);
  EXPECT_EQ(view.tensors.at("p").at("exp_avg").to_vector(),
            a.state_dict().tensors.at("p").at("exp_avg").to_vector());
  EXPECT_NE(view.tensors.at("p").at("exp_avg").to_vector(), before);
}

TEST(Optimizer, AStateOutOfRangeIsRefusedWholeAndChangesNothing) {
  Tensor p1 = start();
  optim::SGD s1({{"p", p1}}, optim::SGDOptions{0.1, 0.9});
  run(s1, p1, 2);
  const optim::OptimizerState good = s1.state_dict();
  Tensor p2 = start();
  optim::SGD s2({{"p", p2}}, optim::SGDOptions{0.5});
  for (const auto& [key, v] : {std::pair{"momentum", std::nan("")}, std::pair{"momentum", -0.5},
                               std::pair{"weight_decay", double(INFINITY)},
                               std::pair{"lr", double(INFINITY)}, std::pair{"lr", -1.0}}) {
    optim::OptimizerState bad = good;
    bad.hyperparameters[key] = v;
    EXPECT_EQ(s2.state_problems(bad).size(), 1u) << key << " = " << v;
    EXPECT_THROW(s2.load_state_dict(bad), ValueError) << key << " = " << v;
    EXPECT_EQ(s2.lr(), 0.5);
    EXPECT_EQ(s2.options().momentum, 0.0);
    EXPECT_TRUE(s2.state_dict().tensors.empty());
  }
  EXPECT_TRUE(s2.state_problems(good).empty());

  Tensor p3 = start();
  optim::Adam a1({{"p", p3}}, optim::AdamOptions{});
  run(a1, p3, 2);
  optim::OptimizerState bad = a1.state_dict();
  bad.hyperparameters["beta2"] = 1.0;
  bad.scalars["p"]["step"] = -INFINITY;
  optim::Adam a2({{"p", start()}}, optim::AdamOptions{});
  EXPECT_EQ(a2.state_problems(bad).size(), 2u);  // every problem, not the first
  try {
    a2.load_state_dict(bad);
    ADD_FAILURE() << "the state loaded";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'p/step' = -inf"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("betas (0.9, 1)"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(a2.state_dict().scalars.empty());
  EXPECT_EQ(a2.options().beta2, optim::AdamOptions{}.beta2);
}

TEST(Optimizer, RejectsBadOptions) {
  EXPECT_THROW(optim::SGD({{"p", start()}}, optim::SGDOptions{-1.0}), ValueError);
  EXPECT_THROW(optim::SGD({{"p", start()}}, optim::SGDOptions{0.1, std::nan("")}), ValueError);
  EXPECT_THROW(optim::SGD({{"p", start()}}, optim::SGDOptions{double(INFINITY)}), ValueError);
  optim::SGDOptions nesterov;
  nesterov.nesterov = true;
  EXPECT_THROW(optim::SGD({{"p", start()}}, nesterov), ValueError);
  optim::AdamOptions bad;
  bad.beta1 = 1.0;
  EXPECT_THROW(optim::Adam({{"p", start()}}, bad), ValueError);
  optim::AdamOptions infinite_eps;
  infinite_eps.eps = INFINITY;
  EXPECT_THROW(optim::Adam({{"p", start()}}, infinite_eps), ValueError);
  EXPECT_THROW(optim::SGD({{"p", start()}, {"p", start()}}, optim::SGDOptions{}), ValueError);
}

TEST(LRScheduler, ClosedFormsMatchPyTorch) {
  Tensor p = start();
  optim::SGD opt({{"p", p}}, optim::SGDOptions{0.1});
  optim::StepLR step(opt, 3, 0.5);
  std::vector<double> lrs;
  for (int e = 0; e < 7; ++e) {
    step.step();
    lrs.push_back(opt.lr());
  }
  EXPECT_EQ(lrs, (std::vector<double>{0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025}));

  optim::SGD opt2({{"p", start()}}, optim::SGDOptions{1.0});
  optim::CosineAnnealingLR cos(opt2, 4, 0.0);
  cos.step();
  EXPECT_NEAR(opt2.lr(), (1 + std::cos(M_PI / 4)) / 2, 1e-12);
  cos.step();
  EXPECT_NEAR(opt2.lr(), 0.5, 1e-12);
  cos.step();
  cos.step();
  EXPECT_NEAR(opt2.lr(), 0.0, 1e-12);

  optim::SGD opt3({{"p", start()}}, optim::SGDOptions{1.0});
  optim::LinearLR warm(opt3, 4, 0.2);  // PyTorch's name for LinearWarmup
  EXPECT_NEAR(opt3.lr(), 0.2, 1e-12);
  warm.step();
  EXPECT_NEAR(opt3.lr(), 0.4, 1e-12);
  for (int i = 0; i < 5; ++i) warm.step();
  EXPECT_NEAR(opt3.lr(), 1.0, 1e-12);

  // State round trip.
  optim::SGD opt4({{"p", start()}}, optim::SGDOptions{0.1});
  optim::StepLR step4(opt4, 3, 0.5);
  step4.load_state_dict(step.state_dict());
  EXPECT_EQ(opt4.lr(), opt.lr());
  // A state no scheduler could have is refused, and the scheduler keeps its own.
  for (const auto& [last_epoch, base_lr] :
       {std::pair{-1.0, 0.1}, std::pair{2.5, 0.1}, std::pair{std::nan(""), 0.1},
        std::pair{1e300, 0.1}, std::pair{3.0, -0.1}, std::pair{3.0, double(INFINITY)}}) {
    EXPECT_THROW(step4.load_state_dict({{"last_epoch", last_epoch}, {"base_lr", base_lr}}),
                 ValueError)
        << last_epoch << ", " << base_lr;
  }
  EXPECT_EQ(step4.last_epoch(), step.last_epoch());
  EXPECT_EQ(opt4.lr(), opt.lr());
}

TEST(Adadelta, FollowsPyTorchsFormula) {
  for (const optim::AdadeltaOptions o :
       {optim::AdadeltaOptions{}, optim::AdadeltaOptions{0.5, 0.95, 1e-4, 0.1}}) {
    Tensor p = start();
    optim::Adadelta opt({{"p", p}}, o);
    const auto got = run(opt, p, 6);
    std::vector<double> want = kStart, v(3, 0.0), u(3, 0.0);
    for (int k = 0; k < 6; ++k) {
      for (size_t i = 0; i < 3; ++i) {
        const double g = grad_at(k, i) + o.weight_decay * want[i];
        v[i] = o.rho * v[i] + (1 - o.rho) * g * g;
        const double d = std::sqrt(u[i] + o.eps) / std::sqrt(v[i] + o.eps) * g;
        u[i] = o.rho * u[i] + (1 - o.rho) * d * d;
        want[i] -= o.lr * d;
      }
    }
    expect_matches(got, want);
    const optim::OptimizerState st = opt.state_dict();
    EXPECT_EQ(st.type, "Adadelta");
    EXPECT_EQ(st.scalars.at("p").at("step"), 6.0);
    EXPECT_EQ(st.tensors.at("p").count("square_avg"), 1u);
    EXPECT_EQ(st.tensors.at("p").count("acc_delta"), 1u);
  }
  // Resumed from its state, the trajectory goes on as if uninterrupted.
  Tensor a = start(), b = start();
  optim::Adadelta straight({{"p", a}});
  run(straight, a, 6);
  optim::Adadelta first({{"p", b}});
  run(first, b, 3);
  optim::Adadelta second({{"p", b}});
  second.load_state_dict(first.state_dict());
  for (int k = 3; k < 6; ++k) {
    std::vector<float> g(3);
    for (size_t i = 0; i < 3; ++i) g[i] = static_cast<float>(grad_at(k, i));
    b.set_grad(Tensor::from_host(g, b.shape()));
    second.step();
  }
  EXPECT_EQ(a.to_vector(), b.to_vector());
  Tensor p = start();
  EXPECT_THROW(optim::Adadelta({{"p", p}}, optim::AdadeltaOptions{1.0, 1.5}), ValueError);
  EXPECT_THROW(optim::Adadelta({{"p", p}}, optim::AdadeltaOptions{1.0, 0.9, std::nan("")}),
               ValueError);
}

TEST(LRScheduler, MultiStepLRDropsAtEachMilestone) {
  Tensor p = start();
  optim::SGD opt({{"p", p}}, optim::SGDOptions{1.0});
  optim::MultiStepLR s(opt, {2, 5}, 0.5);
  const std::vector<double> want = {1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25};
  for (size_t e = 0; e < want.size(); ++e)
    EXPECT_DOUBLE_EQ(s.lr_at(static_cast<int64_t>(e)), want[e]);
  s.step();
  s.step();
  EXPECT_DOUBLE_EQ(opt.lr(), 0.5);
  EXPECT_THROW(optim::MultiStepLR(opt, {5, 2}), ValueError);
  EXPECT_THROW(optim::MultiStepLR(opt, {0}), ValueError);
}

TEST(Options, ChainedSettersNameEachOptionAndAggregatesStillWork) {
  const optim::SGDOptions chained =
      optim::SGDOptions{}.with_lr(0.1).with_momentum(0.9).with_nesterov(true);
  EXPECT_EQ(chained.lr, 0.1);
  EXPECT_EQ(chained.momentum, 0.9);
  EXPECT_TRUE(chained.nesterov);
  EXPECT_EQ(chained.dampening, optim::SGDOptions{}.dampening);  // the rest keep their defaults
  const optim::SGDOptions positional{0.1, 0.9};                 // aggregate initialisation
  EXPECT_EQ(positional.momentum, chained.momentum);
  const optim::AdamOptions adam = optim::AdamOptions{}.with_beta2(0.95).with_amsgrad(true);
  EXPECT_EQ(adam.beta2, 0.95);
  EXPECT_TRUE(adam.amsgrad);
  EXPECT_EQ(adam.lr, optim::AdamOptions{}.lr);
  // An optimizer takes the chained options as they are.
  Tensor p = start();
  optim::SGD sgd({{"p", p}}, optim::SGDOptions{}.with_lr(0.25));
  EXPECT_EQ(sgd.lr(), 0.25);
}
