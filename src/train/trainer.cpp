#include "kdp/train/trainer.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/check.hpp"
#include "fit_run.hpp"
#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/error.hpp"
#include "regression_sums.hpp"
#include "run_options.hpp"

namespace kdp::train {

nn::Module& unwrap(nn::Module& model) {
  nn::Module* m = &model;
  while (const std::shared_ptr<nn::Module> inner = m->wrapped()) m = inner.get();
  return *m;
}

Trainer::Trainer(TrainerOptions options, dist::Communicator comm)
    : options_(std::move(options)),
      monitor_(detail::parse_monitor(options_.monitor)),
      resume_(detail::parse_resume(options_.resume)),
      comm_(std::move(comm)) {
  KDP_CHECK(options_.epochs >= 0 && options_.accumulate_grad_batches >= 1, ValueError,
            "epochs {} must be >= 0 and "
            "accumulate_grad_batches {} >= 1",
            options_.epochs, options_.accumulate_grad_batches);
  KDP_CHECK(resume_ != detail::Resume::Auto || !options_.checkpoint_dir.empty(), ValueError,
            "resume = auto needs a checkpoint_dir");
  KDP_CHECK(!options_.overwrite || resume_ == detail::Resume::Fresh, ValueError,
            "overwrite discards what is there; it goes with a fresh start "
            "(resume = \"never\"), not with resume = \"{}\"",
            options_.resume);
  if (options_.devices.empty()) options_.devices.push_back(get_default_device());
  precision_ = resolve_precision(options_.precision, options_.devices.front());
}

EvalResult Trainer::evaluate(nn::Module& model, const nn::LossFunction& loss,
                             data::DataLoader& loader) {
  // Evaluation needs no gradient exchange: run the module inside DDP, so ranks
  // with one batch more or less than the others never wait for each other.
  nn::GradientExchange* exchange = model.gradient_exchange();
  nn::Module& local = exchange != nullptr ? exchange->local_module() : model;
  const bool was_training = local.is_training();
  local.eval();
  NoGradGuard no_grad;
  const bool classes = loader.dataset().num_classes() > 0;
  detail::EpochSums running(options_.devices.front());
  detail::RegressionSums regression(options_.devices.front());
  int64_t samples = 0;
  for (data::Batch& b : loader) {
    autocast mixed(precision_);
    const Tensor out = local.forward(b.features);
    const auto n = b.features.size(0);
    running.add(loss(out, b.labels), static_cast<float>(n), classes ? out : Tensor(), b.labels);
    if (!classes) {
      // Errors in the targets' own units, where the loader standardised them.
      const data::ChannelNormalisation& units = loader.options().normalise_targets;
      const Tensor pred = units.active() ? out.clone() : out;
      const Tensor target = units.active() ? b.labels.clone() : b.labels;
      units.invert(pred);
      units.invert(target);
      regression.add(pred, target);
    }
    samples += n;
  }
  local.train(was_training);
  const std::vector<float> totals = detail::read_scalars({running.loss_sum, running.correct});
  double sums[3] = {totals[0], totals[1], static_cast<double>(samples)};
  comm_.allreduce(sums, 3, dist::ReduceOp::Sum);
  EvalResult r;
  r.count = static_cast<int64_t>(sums[2]);
  r.loss = sums[2] > 0 ? sums[0] / sums[2] : std::nan("");
  r.accuracy = classes && sums[2] > 0 ? sums[1] / sums[2] : std::nan("");
  if (!classes) regression.finish(comm_, r);
  return r;
}

FitResult Trainer::fit(nn::Module& model, const nn::LossFunction& loss, optim::Optimizer& optimizer,
                       data::DataLoader& train_loader, data::DataLoader* val_loader,
                       optim::LRScheduler* scheduler) {
  detail::FitRun run(*this, options_, monitor_, resume_, comm_,
                     {model, loss, optimizer, train_loader, val_loader, scheduler});
  return run.run();
}

}  // namespace kdp::train
