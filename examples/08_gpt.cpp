// A small GPT on text, data-parallel over MPI ranks, then text from it: a
// user's text files become windows of byte tokens (data::import_text, as
// kdp-data import-text), the reference GPT of kdp/nn/transformer.hpp
// (kdp-train's gpt(depth,heads,dim): pre-norm layers with a causal mask, the
// head tied to the token table) learns to predict each next byte with AdamW
// and a cosine schedule, its validation loss reported in bits per byte
// beside the order-0 entropy of the text, and rank 0 prints a sample.
//
//   mpirun -np 2 08_gpt TEXT... [--epochs N] [--depth N] [--context N]
//   (a .h5 of token windows instead of text files is used as it is)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kdp/kdp.hpp"

using namespace kdp;

namespace {

struct Args {
  std::vector<std::string> texts;
  int64_t epochs = 4, depth = 4, context = 128;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    int64_t* value = s == "--epochs"    ? &a.epochs
                     : s == "--depth"   ? &a.depth
                     : s == "--context" ? &a.context
                                        : nullptr;
    if (value != nullptr && i + 1 < argc) {
      *value = std::atoll(argv[++i]);
    } else {
      a.texts.push_back(s);
    }
  }
  if (a.texts.empty()) throw ValueError("08_gpt: name a text file (or a .h5 of token windows)");
  return a;
}

// The token windows: the .h5 given, or the texts imported into one (rank 0).
std::string token_file(const Args& a, dist::Communicator& comm) {
  if (a.texts.size() == 1 && std::filesystem::path(a.texts[0]).extension() == ".h5") {
    return a.texts[0];
  }
  const std::string out = "runs/example08/text.h5";
  if (comm.rank() == 0) {
    std::filesystem::create_directories("runs/example08");
    data::ImportOptions replace;
    replace.existing = data::ExistingOutput::Overwrite;  // a kdp dataset of this example's
    data::import_text(a.texts, out, data::TextOptions{}.with_context(a.context), replace);
  }
  comm.barrier();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Runtime runtime(argc, argv);  // MPI first, then Kokkos
  try {
    dist::Communicator comm = dist::Communicator::world();
    const Args args = parse(argc, argv);
    const std::string path = token_file(args, comm);
    auto train_set = std::make_shared<data::TokenDataset>(path, "train");
    auto test_set = std::make_shared<data::TokenDataset>(path, "test");
    data::DistributedSamplerOptions exact;
    exact.exact = true;
    exact.shuffle = false;
    data::DataLoaderOptions loading;
    loading.batch_size = 16;  // windows per rank
    data::DataLoader train_loader(
        train_set,
        std::make_shared<data::DistributedSampler>(train_set->size(), comm.size(), comm.rank()),
        loading);
    data::DataLoader test_loader(test_set,
                                 std::make_shared<data::DistributedSampler>(
                                     test_set->size(), comm.size(), comm.rank(), exact),
                                 loading);

    manual_seed(7);
    nn::GPTOptions gpt;  // heads 4, dim 128, dropout 0.1
    gpt.depth = args.depth;
    auto model = std::make_shared<nn::GPT>(train_set->num_classes(), train_set->context(), gpt);
    dist::DistributedDataParallel parallel(model, comm);
    optim::AdamOptions adamw = optim::adamw_defaults();
    adamw.lr = 1e-3;
    optim::AdamW optimizer(model->named_parameters(), adamw);
    optim::CosineAnnealingLR schedule(optimizer, args.epochs);

    train::TrainerOptions t;
    t.epochs = args.epochs;
    t.checkpoint_dir = "runs/example08/checkpoints";
    t.resume = "auto";  // run it again: it continues where it stopped
    t.metrics_path = "runs/example08/metrics.csv";
    t.monitor = "val_loss";
    t.log_every_steps = 100;
    t.bytes_per_token = test_set->bytes_per_token();  // losses in bits per byte too
    train::Trainer trainer(t, comm);
    // Logits [B, T, V] against the next tokens [B, T]: one class a position.
    const nn::LossFunction loss = [](const Tensor& out, const Tensor& next) {
      const int64_t positions = next.numel();
      return cross_entropy(out.reshape({positions, out.size(2)}), next.reshape({positions}));
    };
    const train::FitResult result =
        trainer.fit(parallel, loss, optimizer, train_loader, &test_loader, &schedule);
    if (result.stopped_by_signal) return train::kExitRequeue;

    const train::EvalResult test = trainer.evaluate(parallel, loss, test_loader);
    if (comm.rank() == 0) {
      const double bpb = test.loss / std::log(2.0) / test_set->bytes_per_token();
      const double order0 = test_set->order0_bits_per_byte();
      std::printf(
          "validation %.4f bits per byte, order-0 entropy %.4f (%s it) on %d ranks, "
          "gpt(%lld,%lld,%lld), context %lld\n",
          bpb, order0, bpb < order0 ? "below" : "NOT below", comm.size(),
          static_cast<long long>(gpt.depth), static_cast<long long>(gpt.heads),
          static_cast<long long>(gpt.dim), static_cast<long long>(train_set->context()));
      const std::vector<int64_t> ids =
          model->generate(test_set->encode("\n"), 200, /*temperature=*/0.8, /*seed=*/1);
      std::printf("sample:\n%s\n", test_set->decode(ids).c_str());
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "08_gpt: rank %d: %s\n", runtime.world_rank(), e.what());
    return 1;
  }
}
