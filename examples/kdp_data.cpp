// kdp-data: brings datasets into kdp's HDF5 layout and shows what a file holds.
//
//   kdp-data import-idx --images F --labels F --out OUT.h5 --split train|test
//   kdp-data import-fashion-mnist --out data/fashion-mnist.h5 [--dir DIR]
//   kdp-data info FILE.h5
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>

#include "cli_checks.hpp"
#include "kdp/kdp.hpp"

namespace {

using namespace kdp;

void print_group(const io::h5::Group& g, const std::string& path, int indent) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  for (const auto& [name, value] : g.attributes()) {
    std::printf("%s  @%s = %s\n", pad.c_str(), name.c_str(), value.c_str());
  }
  for (const std::string& name : g.members()) {
    const std::string child = path == "/" ? "/" + name : path + "/" + name;
    if (g.is_group(name)) {
      std::printf("%s%s/ (group)\n", pad.c_str(), child.c_str());
      print_group(g.open_group(name), child, indent + 2);
    } else {
      const io::h5::Dataset d = g.open_dataset(name);
      std::printf("%s%s  %s [%s]\n", pad.c_str(), child.c_str(), io::h5::to_string(d.type()),
                  fmt::format("{}", fmt::join(d.dims(), ", ")).c_str());
      for (const auto& [aname, value] : d.attributes()) {
        std::printf("%s    @%s = %s\n", pad.c_str(), aname.c_str(), value.c_str());
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kdp-data: import datasets into kdp's HDF5 layout and inspect HDF5 files"};
  kdp::cli::use_plain_messages(app, "kdp-data");
  app.require_subcommand(1);

  std::string images, labels, out, split = "train";
  int64_t classes = 10;
  auto* idx =
      app.add_subcommand("import-idx", "Import a pair of IDX files (gzip or plain) as one split");
  idx->add_option("--images", images, "IDX file of images (uint8, [N, ...])")->required();
  idx->add_option("--labels", labels, "IDX file of labels (uint8, [N])")->required();
  idx->add_option("--out", out, "HDF5 file to write (other splits in it are kept)")->required();
  idx->add_option("--split", split, "Split name")->check(CLI::IsMember({"train", "test"}));
  idx->add_option("--classes", classes, "Number of classes (labels must be below it)")
      ->check(kdp::cli::whole_number(1, 256));  // labels are bytes

  std::string fm_dir;
  auto* fm =
      app.add_subcommand("import-fashion-mnist",
                         "Import both splits of Fashion-MNIST (Debian's dataset-fashion-mnist)");
  fm->add_option("--out", out, "HDF5 file to write")->required();
  fm->add_option("--dir", fm_dir,
                 "Directory of the IDX files (default: $KDP_FASHION_MNIST_DIR or "
                 "/usr/share/datasets/fashion-mnist)");

  std::string file;
  auto* info = app.add_subcommand(
      "info", "Print the groups, datasets, shapes, types and attributes of an HDF5 file");
  info->add_option("file", file, "HDF5 file")->required();

  if (const int status = cli::parse(app, argc, argv); status >= 0) return status;
  try {
    if (*idx) {
      data::ImportOptions options;
      options.num_classes = classes;
      data::import_idx({{split, images, labels}}, out, options);
      std::printf("imported %s split into %s\n", split.c_str(), out.c_str());
    } else if (*fm) {
      data::import_fashion_mnist(out, fm_dir);
      std::printf("imported Fashion-MNIST (train and test) into %s\n", out.c_str());
    } else if (*info) {
      io::h5::File f = io::h5::File::open(file);
      std::printf("%s\n", file.c_str());
      print_group(f, "/", 0);
    }
    return 0;
  } catch (const kdp::Error& e) {
    std::fprintf(stderr, "kdp-data: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kdp-data: %s\n", e.what());
    return 1;
  }
}
