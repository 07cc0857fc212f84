// kdp-data: brings datasets into kdp's HDF5 layout and shows what a file holds.
//
//   kdp-data import-idx --images F --labels F --out OUT.h5 --split train|test
//            [--add-split | --overwrite]
//   kdp-data import-npy --inputs X.npy|A.npz:x --targets Y.npy|A.npz:y --out OUT.h5
//            [--split train|test] [--classes N] [--add-split | --overwrite]
//   kdp-data import-fashion-mnist --out data/fashion-mnist.h5 [--dir DIR] [--overwrite]
//   kdp-data import-text FILE... --out OUT.h5 --context N [--vocab bytes|chars]
//            [--test-fraction F] [--dataset NAME] [--add-split | --overwrite]
//   kdp-data info FILE.h5 [--inputs NAME --targets NAME --val-data F --val-fraction X]
//   kdp-data check-output PATH --kind plot|trace|status|checkpoint|dataset [--overwrite]
//
// An existing --out is written only when asked and only when it is a kdp
// dataset: --add-split adds a split it lacks, --overwrite replaces the imported
// splits. Any other file (a checkpoint, a user's own HDF5 file) is never
// written into.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>

#include "cli_checks.hpp"
#include "kdp/kdp.hpp"

using namespace kdp;

namespace {

// Every option of every subcommand.
struct Options {
  std::string images, labels, out, split = "train";
  int64_t classes = 10;
  std::string inputs, targets;
  int64_t npy_classes = 0;
  bool add_split = false, overwrite = false;
  std::string fm_dir;
  std::vector<std::string> texts;
  int64_t context = 0;
  std::string vocab = "bytes", dataset;
  double test_fraction = 0.1;
  std::string file;
  data::SplitSpec spec;  // what info shows kdp-train would read
  std::string output, kind;
};

CLI::App* add_import_idx(CLI::App& app, Options& o) {
  auto* idx =
      app.add_subcommand("import-idx", "Import a pair of IDX files (gzip or plain) as one split");
  idx->add_option("--images", o.images, "IDX file of images (uint8, [N, ...])")->required();
  idx->add_option("--labels", o.labels, "IDX file of labels (uint8, [N])")->required();
  idx->add_option("--out", o.out,
                  "HDF5 file to write; an existing kdp dataset only with --add-split or "
                  "--overwrite (its other splits are kept)")
      ->required();
  idx->add_option("--split", o.split, "Split name")->check(CLI::IsMember({"train", "test"}));
  idx->add_option("--classes", o.classes, "Number of classes (labels must be below it)")
      ->check(kdp::cli::whole_number(1, 256));  // labels are bytes
  idx->add_flag("--add-split", o.add_split, "Add the split to an existing --out that has none");
  idx->add_flag("--overwrite", o.overwrite, "Replace the split in an existing --out");
  return idx;
}

CLI::App* add_import_npy(CLI::App& app, Options& o) {
  auto* npy = app.add_subcommand(
      "import-npy", "Import numpy arrays (.npy files or .npz members) as one split, streaming");
  npy->add_option("--inputs", o.inputs, "Inputs [N, ...]: X.npy, or A.npz:x for x in A.npz")
      ->required();
  npy->add_option("--targets", o.targets,
                  "Targets: integer classes [N], or floats [N, ...] (a regression)")
      ->required();
  npy->add_option("--out", o.out,
                  "HDF5 file to write; an existing kdp dataset only with --add-split or "
                  "--overwrite (its other splits are kept)")
      ->required();
  npy->add_option("--split", o.split, "Split name")->check(CLI::IsMember({"train", "test"}));
  npy->add_option("--classes", o.npy_classes,
                  "Number of classes of integer targets (default: the largest + 1)")
      ->check(kdp::cli::whole_number(1));
  npy->add_flag("--add-split", o.add_split, "Add the split to an existing --out that has none");
  npy->add_flag("--overwrite", o.overwrite, "Replace the split in an existing --out");
  return npy;
}

CLI::App* add_import_fashion_mnist(CLI::App& app, Options& o) {
  auto* fm =
      app.add_subcommand("import-fashion-mnist",
                         "Import both splits of Fashion-MNIST (Debian's dataset-fashion-mnist)");
  fm->add_option("--out", o.out, "HDF5 file to write")->required();
  fm->add_flag("--overwrite", o.overwrite, "Replace both splits of an existing --out");
  fm->add_option("--dir", o.fm_dir,
                 "Directory of the IDX files (default: $KDP_FASHION_MNIST_DIR or "
                 "/usr/share/datasets/fashion-mnist)");
  return fm;
}

CLI::App* add_import_text(CLI::App& app, Options& o) {
  auto* text = app.add_subcommand(
      "import-text",
      "Import UTF-8 text files as windows of tokens for next-token prediction (/train and "
      "/test), streaming");
  text->add_option("files", o.texts, "Text files, in order: one text, whose end is the test split")
      ->required();
  text->add_option("--out", o.out,
                   "HDF5 file to write; an existing kdp dataset only with --add-split or "
                   "--overwrite (its other splits are kept)")
      ->required();
  text->add_option("--context", o.context,
                   "Tokens a window predicts (N): rows of N + 1 tokens, consecutive rows "
                   "sharing one")
      ->required()
      ->check(kdp::cli::whole_number(1));
  text->add_option("--vocab", o.vocab,
                   "bytes: each byte a token (256); chars: each distinct character a token "
                   "(at most 65536, table in /vocab)")
      ->check(CLI::IsMember({"bytes", "chars"}));
  text->add_option("--test-fraction", o.test_fraction,
                   "Share of the tokens, from the end, held out as /test (default 0.1)")
      ->check(kdp::cli::real_number(0.0, false));
  text->add_option("--dataset", o.dataset, "Dataset name (default: the first file's name)");
  text->add_flag("--add-split", o.add_split, "Add the splits to an existing --out that has none");
  text->add_flag("--overwrite", o.overwrite, "Replace the splits in an existing --out");
  return text;
}

// import-text, and what it wrote.
void import_text(const Options& o, data::ExistingOutput existing) {
  data::ImportOptions options;
  options.existing = existing;
  options.dataset =
      o.dataset.empty() ? std::filesystem::path(o.texts.front()).stem().string() : o.dataset;
  const data::TextOptions text =
      data::TextOptions{}
          .with_context(o.context)
          .with_tokenizer(o.vocab == "chars" ? data::Tokenizer::Chars : data::Tokenizer::Bytes)
          .with_test_fraction(o.test_fraction);
  const data::ImportedText t = data::import_text(o.texts, o.out, text, options);
  std::printf(
      "imported %lld tokens (%s, vocab size %lld) into %s: train %lld rows, test %lld rows of "
      "context %lld + 1\n",
      static_cast<long long>(t.tokens), o.vocab.c_str(), static_cast<long long>(t.vocab_size),
      o.out.c_str(), static_cast<long long>(t.train_rows), static_cast<long long>(t.test_rows),
      static_cast<long long>(o.context));
}

CLI::App* add_info(CLI::App& app, Options& o) {
  auto* info = app.add_subcommand(
      "info", "Print the groups, datasets, shapes, types and attributes of an HDF5 file");
  info->add_option("file", o.file, "HDF5 file")->required();
  info->add_option("--inputs", o.spec.inputs,
                   "Show what kdp-train would read with this --inputs (default: images)");
  info->add_option("--targets", o.spec.targets, "... and this --targets (default: labels)");
  info->add_option("--val-data", o.spec.val_file, "... and this --val-data");
  info->add_option("--val-fraction", o.spec.val_fraction, "... and this --val-fraction")
      ->check(kdp::cli::real_number(0.0, true));
  return info;
}

CLI::App* add_check_output(CLI::App& app, Options& o) {
  auto* check = app.add_subcommand(
      "check-output",
      "Apply kdp's rule for the files it writes to PATH (for scripts that write them, such as "
      "plot_metrics): exit 0 when a file of --kind may be written there, 1 with the reason");
  check->add_option("path", o.output, "The file to be written")->required();
  check->add_option("--kind", o.kind, "What is to be written there")
      ->required()
      ->check(CLI::IsMember({"plot", "trace", "status", "checkpoint", "dataset"}));
  check->add_flag("--overwrite", o.overwrite, "The user asks to replace a file of that kind");
  return check;
}

// One part's samples as kdp-train sees them.
std::string describe(const data::Dataset& part, const std::string& name, bool tokens) {
  if (tokens) {
    const auto& t = static_cast<const data::TokenDataset&>(part);
    return fmt::format(
        "{}: {} windows of {} {} tokens (a vocabulary of {}), each position's "
        "target the next token",
        name, t.size(), t.context(), t.tokenizer(), t.num_classes());
  }
  const std::string targets =
      part.num_classes() > 0
          ? fmt::format("{} classes", part.num_classes())
          : fmt::format("float targets {} (a regression)", part.label_shape().str());
  return fmt::format("{}: {} samples {} of {}, {}", name, part.size(), part.sample_shape().str(),
                     part.feature_type(), targets);
}

// What kdp-train would train and validate on with the given options, or why
// it would refuse the file.
void training_view(const Options& o) {
  data::SplitSpec spec = o.spec;
  spec.file = o.file;
  std::printf("\nkdp-train --data %s --inputs %s --targets %s would read:\n", o.file.c_str(),
              spec.inputs.c_str(), spec.targets.c_str());
  try {
    const data::Splits s = data::open_splits(spec);
    std::printf("  training:   %s\n", describe(*s.train, s.train_name, s.tokens()).c_str());
    std::printf("  validation: %s\n", describe(*s.val, s.val_name, s.tokens()).c_str());
    std::printf("  loss: %s\n", s.tokens()       ? "cross_entropy of the next tokens, with "
                                                   "--model 'gpt(depth,heads,dim)'"
                                : s.regression() ? "mse (or --loss l1, smooth_l1, huber)"
                                                 : "cross_entropy");
  } catch (const kdp::Error& e) {
    std::printf("  nothing: it would refuse the file: %s\n", e.message().c_str());
  }
}

// The work of the subcommand given: what main() calls once the options parse.
void run(const Options& o, const CLI::App& idx, const CLI::App& npy, const CLI::App& fm,
         const CLI::App& text, const CLI::App& check) {
  const data::ExistingOutput existing = o.overwrite   ? data::ExistingOutput::Overwrite
                                        : o.add_split ? data::ExistingOutput::AddSplits
                                                      : data::ExistingOutput::Refuse;
  if (idx) {
    data::ImportOptions options;
    options.existing = existing;
    options.num_classes = o.classes;
    data::import_idx({{o.split, o.images, o.labels}}, o.out, options);
    std::printf("imported %s split into %s\n", o.split.c_str(), o.out.c_str());
  } else if (npy) {
    data::ImportOptions options;
    options.existing = existing;
    options.num_classes = o.npy_classes;
    data::import_npy({{o.split, o.inputs, o.targets}}, o.out, options);
    std::printf("imported %s split into %s\n", o.split.c_str(), o.out.c_str());
  } else if (fm) {
    data::import_fashion_mnist(o.out, o.fm_dir, existing);
    std::printf("imported Fashion-MNIST (train and test) into %s\n", o.out.c_str());
  } else if (text) {
    import_text(o, existing);
  } else if (check) {
    const std::map<std::string, io::OutputKind> kinds = {
        {"plot", io::OutputKind::plot()},
        {"trace", io::OutputKind::trace()},
        {"status", io::OutputKind::status()},
        {"checkpoint", io::OutputKind::checkpoint()},
        {"dataset", io::OutputKind::dataset()}};
    io::claim_output(o.output, kinds.at(o.kind), o.overwrite, "");
  } else {
    std::fputs(io::hdf5_listing(o.file).c_str(), stdout);
    training_view(o);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kdp-data: import datasets into kdp's HDF5 layout and inspect HDF5 files"};
  kdp::cli::use_plain_messages(app, "kdp-data");
  app.require_subcommand(1);
  Options o;
  CLI::App* idx = add_import_idx(app, o);
  CLI::App* npy = add_import_npy(app, o);
  CLI::App* fm = add_import_fashion_mnist(app, o);
  CLI::App* text = add_import_text(app, o);
  CLI::App* info = add_info(app, o);
  CLI::App* check = add_check_output(app, o);
  for (CLI::App* sub : {idx, npy, fm, text, info, check}) sub->allow_extras();  // refused below
  if (const int status = cli::parse(app, argc, argv); status >= 0) return status;
  for (CLI::App* sub : {idx, npy, fm, text, info, check}) {
    if (!*sub) continue;
    if (const int status = cli::reject_unknown(*sub, sub->remaining(), "kdp-data"); status >= 0) {
      return status;
    }
  }
  if (o.add_split && o.overwrite) {
    std::fprintf(stderr,
                 "kdp-data: --add-split adds a split only where there is none; --overwrite "
                 "replaces it: choose one\n");
    return 1;
  }
  try {
    run(o, *idx, *npy, *fm, *text, *check);
    return 0;
  } catch (const kdp::Error& e) {
    std::fprintf(stderr, "kdp-data: %s\n", e.origin().empty() ? e.message().c_str() : e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kdp-data: %s\n", e.what());
    return 1;
  }
}
