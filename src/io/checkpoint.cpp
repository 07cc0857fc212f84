#include "kdp/io/checkpoint.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <functional>
#include <string_view>
#include <tuple>

#include "core/check.hpp"
#include "io/hdf5.hpp"
#include "kdp/core/checked_size.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/runtime.hpp"
#include "kdp/core/trace.hpp"
#include "kdp/io/atomic_file.hpp"
#include "kdp/io/output_file.hpp"
#include "kdp/version.hpp"
#include "kernels/fork_join.hpp"
#include "kernels/native/finite.hpp"

namespace kdp::io {

namespace {

constexpr int64_t kFormatVersion = 1;

// Where the first NaN or Inf of `n` values is and what it is, or "" when all
// are finite: "NaN at index 12 (position [0, 12])". The values are the flat
// elements [first, first + n) of a tensor of `shape`.
std::string first_non_finite(const float* values, int64_t n, const Shape& shape,
                             int64_t first = 0) {
  const int64_t i = detail::first_non_finite(values, n);
  if (i < n) {
    std::vector<int64_t> position(static_cast<size_t>(shape.rank()));
    int64_t rest = first + i;
    for (int d = shape.rank() - 1; d >= 0; --d) {
      position[static_cast<size_t>(d)] = shape[d] > 0 ? rest % shape[d] : 0;
      rest = shape[d] > 0 ? rest / shape[d] : 0;
    }
    return fmt::format("{} at index {} (position [{}])", std::isnan(values[i]) ? "NaN" : "Inf",
                       first + i, fmt::join(position, ", "));
  }
  return "";
}

// BatchNorm's num_batches_tracked, a count (int64 in PyTorch's state dicts).
bool is_count_entry(const std::string& name) {
  const std::string tail = "num_batches_tracked";
  return name.size() >= tail.size() &&
         name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
}

// `name` is the dataset's name in `g`; `entry` names it in errors ("fc1.weight").
void write_tensor(const h5::Group& g, const std::string& name, const Tensor& t,
                  const std::string& entry, const std::string& path) {
  std::vector<int64_t> dims = t.shape().to_vector();
  // Memory the host can read is written as it is (a tensor is contiguous);
  // a device's is copied over first.
  std::vector<float> copied;
  const float* values = t.data();
  if constexpr (compat::host_accessible_memory()) {
    t.device().fence("kdp::io::save_checkpoint");
  } else {
    copied = t.to_vector();
    values = copied.data();
  }
  // A checkpoint is what a run goes back to: one with a NaN would carry it
  // into every run resumed from it.
  const std::string bad = first_non_finite(values, t.numel(), t.shape());
  KDP_CHECK(bad.empty(), NumericalError, "'{}' holds {}; '{}' was not written", entry, bad, path);
  if (is_count_entry(name)) {
    // PyTorch stores BatchNorm's count as int64: so does the file.
    std::vector<int64_t> counts(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < counts.size(); ++i) counts[i] = static_cast<int64_t>(values[i]);
    g.create_dataset(name, h5::Type::Int64, dims).write_all(counts.data());
    return;
  }
  h5::Dataset d = g.create_dataset(name, h5::Type::Float32, dims);  // rank 0 for scalars
  d.write_all(values);
}

// A tensor read from a checkpoint holds only finite values: its elements
// [first, first + n) at `values`.
void check_finite(const float* values, int64_t n, const Shape& shape, const h5::Dataset& d,
                  int64_t first = 0) {
  const std::string bad = first_non_finite(values, n, shape, first);
  KDP_CHECK(bad.empty(), IOError,
            "checkpoint entry '{}' in '{}' holds {}; a checkpoint with "
            "non-finite values is not loaded",
            d.path(), d.file(), bad);
}

Tensor read_tensor(const h5::Dataset& d) {
  const std::vector<int64_t> dims = d.dims();
  const h5::Type type = d.type();
  const bool integer =
      type == h5::Type::Int64 || type == h5::Type::UInt16 || type == h5::Type::UInt32;
  const bool count = integer && is_count_entry(d.path());
  KDP_CHECK(type == h5::Type::Float32 || type == h5::Type::Float64 || count, IOError,
            "checkpoint entry '{}' in '{}' holds {}, not floats", d.path(), d.file(),
            h5::to_string(type));
  if (compat::host_accessible_memory()) {
    // Straight into the tensor: no staging copy of what may be gigabytes. The
    // size is checked against the file before the tensor is allocated.
    d.check_plausible();
    Tensor t = Tensor::empty(Shape(dims));
    if (t.numel() > 0) d.read_all(t.data());
    check_finite(t.data(), t.numel(), t.shape(), d);
    return t;
  }
  const std::vector<float> values = d.read_all<float>();
  Tensor t = Tensor::from_host(values, Shape(dims));
  check_finite(values.data(), t.numel(), t.shape(), d);
  return t;
}

// `bytes` at `offset` of file `fd` into `out`: 0, or the error (EIO where the
// file ends first).
int read_at(int fd, char* out, size_t bytes, int64_t offset) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, out + done, bytes - done, offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

// Values [first, first + count) of dataset `set`'s tensor, read from the file.
struct Piece {
  size_t set;
  int64_t first, count;
};

// The pieces of `sets` whose values host memory can take straight from the
// file (contiguous float32), each in a fresh tensor of `out`; `at` gets their
// offsets in the file.
std::vector<Piece> direct_pieces(const std::vector<const h5::Dataset*>& sets,
                                 std::vector<Tensor>& out, std::vector<int64_t>& at) {
  constexpr int64_t kPieceValues = int64_t{1} << 18;  // 1 MiB: in the core's cache when scanned
  std::vector<Piece> pieces;
  if constexpr (compat::host_accessible_memory()) {
    for (size_t i = 0; i < sets.size(); ++i) {
      const std::optional<int64_t> offset = sets[i]->native_float_offset();
      if (!offset) continue;
      at[i] = *offset;
      out[i] = Tensor::empty(Shape(sets[i]->dims()));
      const int64_t n = out[i].numel();
      for (int64_t f = 0; f < n; f += kPieceValues) {
        pieces.push_back({i, f, std::min(kPieceValues, n - f)});
      }
    }
  } else {
    (void)sets, (void)out, (void)at;
  }
  return pieces;
}

// Every dataset of `sets` (of one file) into fresh tensors, each checked for
// NaN and Inf. Contiguous float32 datasets go straight from the file into host
// memory, in pieces over the rank's threads, each piece scanned as it arrives;
// the others through HDF5 (which is not thread-safe, so before the threads
// start). The error named is the first piece's at fault in the list's order.
std::vector<Tensor> read_tensors(const std::vector<const h5::Dataset*>& sets) {
  std::vector<Tensor> out(sets.size());
  std::vector<int64_t> at(sets.size(), -1);
  const std::vector<Piece> pieces = direct_pieces(sets, out, at);
  for (size_t i = 0; i < sets.size(); ++i) {
    if (at[i] < 0) out[i] = read_tensor(*sets[i]);
  }
  if (pieces.empty()) return out;
  const std::string& file = sets.front()->file();
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  KDP_CHECK(fd >= 0, IOError, "cannot open checkpoint '{}' to read its tensors: {}", file,
            describe_file_error(errno));
  struct Closer {  // closed however the reads end
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  std::vector<std::string> errors(pieces.size());
  detail::fork_join(Runtime::get().threads(), static_cast<int64_t>(pieces.size()), [&](int64_t b) {
    const Piece& p = pieces[static_cast<size_t>(b)];
    const Tensor& t = out[p.set];
    float* values = t.data() + p.first;
    const int err = read_at(fd, reinterpret_cast<char*>(values), static_cast<size_t>(p.count) * 4,
                            at[p.set] + p.first * 4);
    const std::string bad = err == 0 ? first_non_finite(values, p.count, t.shape(), p.first) : "";
    if (err != 0 || !bad.empty()) {
      errors[static_cast<size_t>(b)] =
          err != 0 ? fmt::format("cannot read checkpoint entry '{}' in '{}': {}",
                                 sets[p.set]->path(), file, describe_file_error(err))
                   : fmt::format(
                         "checkpoint entry '{}' in '{}' holds {}; a checkpoint with "
                         "non-finite values is not loaded",
                         sets[p.set]->path(), file, bad);
    }
  });
  for (const std::string& e : errors) KDP_CHECK(e.empty(), IOError, "{}", e);
  return out;
}

h5::File open_checkpoint(const std::string& path) {
  h5::File f = h5::File::open(path);
  KDP_CHECK(f.has_attribute("format") && f.attribute_string("format") == "kdp-checkpoint", IOError,
            "'{}' is not a kdp checkpoint (no format attribute "
            "'kdp-checkpoint')",
            path);
  const int64_t version = f.attribute_int("format_version");
  KDP_CHECK(version <= kFormatVersion, IOError,
            "'{}' has checkpoint format version {}; this kdp reads up "
            "to {}",
            path, version, kFormatVersion);
  return f;
}

bool has_member(const h5::Group& g, const std::string& name) {
  const std::vector<std::string> members = g.members();
  return std::find(members.begin(), members.end(), name) != members.end();
}

// An unsigned decimal number that is the whole of `text`.
bool parse_u64(std::string_view text, uint64_t& out) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return !text.empty() && ec == std::errc() && ptr == end;
}

TrainingState read_training_state(const h5::File& f, const std::string& path) {
  // A count below `least` cannot come from a run: the file is corrupt.
  auto count = [&](const char* name, int64_t least) {
    const int64_t v = f.attribute_int(name);
    KDP_CHECK(v >= least, IOError, "{} = {} in '{}' is below {}: not a checkpoint kdp wrote", name,
              v, path, least);
    return v;
  };
  TrainingState s;
  s.epoch = count("epoch", 0);
  s.global_step = count("global_step", 0);
  s.batch_in_epoch = count("batch_in_epoch", 0);
  s.sampler_seed = static_cast<uint64_t>(f.attribute_int("sampler_seed"));
  s.world_size = count("world_size", 1);
  s.devices_per_rank = count("devices_per_rank", 1);
  s.kdp_version = f.attribute_string("kdp_version");
  s.model_signature = f.attribute_string("model_signature");
  for (const std::string& r : f.attribute_strings("rng_states")) {
    const size_t colon = r.find(':');
    uint64_t seed = 0, offset = 0;
    KDP_CHECK(colon != std::string::npos && parse_u64(std::string_view(r).substr(0, colon), seed) &&
                  parse_u64(std::string_view(r).substr(colon + 1), offset),
              IOError, "rng state '{}' in '{}' is not seed:offset", r, path);
    s.rng.emplace_back(seed, offset);
  }
  h5::Group values = f.open_group("training");
  for (const auto& [key, text] : values.attributes()) s.values[key] = values.attribute_double(key);
  for (const std::string& key : values.members()) {
    h5::Dataset d = values.open_dataset(key);
    KDP_CHECK(d.dims().size() == 1, IOError, "/training/{} in '{}' is not a list of numbers", key,
              path);
    s.series[key] = d.read_all<double>();
  }
  if (has_member(f, "run")) {
    h5::Group run = f.open_group("run");
    for (const auto& [key, text] : run.attributes()) s.run_config[key] = run.attribute_string(key);
  }
  return s;
}

std::string parameters_setting(int64_t numel, const std::string& signature) {
  return fmt::format("{} values, {}", numel, signature);
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

std::string model_signature(const nn::StateDict& state) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::string& s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
  };
  for (const auto& [name, t] : state) mix(name + " " + t.shape().str() + "\n");
  return fmt::format("fnv1a64:{:016x}", h);
}

namespace {

// The file's own attributes (format, position, rng states, the model's
// signature), /training's numbers and lists, and /run's configuration.
void write_training_state(h5::File& f, const TrainingState& state, const nn::StateDict& sd,
                          const nn::Module& model) {
  f.set_attribute("format", "kdp-checkpoint");
  f.set_attribute("format_version", kFormatVersion);
  f.set_attribute("kdp_version",
                  state.kdp_version.empty() ? std::string(version_string) : state.kdp_version);
  f.set_attribute("created", now_utc());
  f.set_attribute("epoch", state.epoch);
  f.set_attribute("global_step", state.global_step);
  f.set_attribute("batch_in_epoch", state.batch_in_epoch);
  f.set_attribute("sampler_seed", static_cast<int64_t>(state.sampler_seed));
  f.set_attribute("world_size", state.world_size);
  f.set_attribute("devices_per_rank", state.devices_per_rank);
  f.set_attribute("model_signature", model_signature(sd));
  f.set_attribute("model_repr", model.to_string());
  std::vector<std::string> rng;
  for (const auto& [seed, offset] : state.rng) rng.push_back(fmt::format("{}:{}", seed, offset));
  f.set_attribute("rng_states", rng);
  h5::Group values = f.create_group("training");
  for (const auto& [key, v] : state.values) values.set_attribute(key, v);
  for (const auto& [key, v] : state.series) {
    values.create_dataset(key, h5::Type::Float64, {static_cast<int64_t>(v.size())})
        .write_all(v.data());
  }
  if (!state.run_config.empty()) {
    h5::Group run = f.create_group("run");
    for (const auto& [key, v] : state.run_config) run.set_attribute(key, v);
  }
}

// What loading would refuse is refused before anything is written.
void check_state_to_save(const TrainingState& state, const std::string& path) {
  for (const auto& [name, v, least] :
       {std::tuple{"epoch", state.epoch, 0}, std::tuple{"global_step", state.global_step, 0},
        std::tuple{"batch_in_epoch", state.batch_in_epoch, 0},
        std::tuple{"world_size", state.world_size, 1},
        std::tuple{"devices_per_rank", state.devices_per_rank, 1}}) {
    KDP_CHECK(v >= least, ValueError,
              "{} = {} is below {}; '{}' was not "
              "written",
              name, v, least, path);
  }
}

// Writes one state tensor (`pname`/`key`) into `g`: its values, or room for them.
using PutStateTensor = std::function<void(const h5::Group& g, const std::string& pname,
                                          const std::string& key, const Tensor& t)>;

// /optimizer: the type, hyperparameters and parameters' order, and each
// parameter's state: its tensors through `put` and its scalars.
void write_optimizer(h5::File& f, const optim::OptimizerState& os,
                     const optim::NamedParameters& params, const PutStateTensor& put) {
  h5::Group o = f.create_group("optimizer");
  o.set_attribute("type", os.type);
  for (const auto& [key, value] : os.hyperparameters) o.set_attribute(key, value);
  std::vector<std::string> order;
  for (const auto& [name, p] : params) order.push_back(name);
  o.set_attribute("parameters", order);
  h5::Group st = o.create_group("state");
  std::map<std::string, bool> done;
  for (const auto& [pname, entries] : os.tensors) {
    h5::Group pg = st.create_group(pname);
    for (const auto& [key, t] : entries) put(pg, pname, key, t);
    done[pname] = true;
  }
  for (const auto& [pname, entries] : os.scalars) {
    h5::Group pg = done[pname] ? st.open_group(pname) : st.create_group(pname);
    for (const auto& [key, v] : entries) pg.set_attribute(key, v);
  }
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const TrainingState& state) {
  trace::Region region("kdp::io::save_checkpoint");
  check_state_to_save(state, path);
  // Saving to a path replaces a checkpoint there, and nothing else.
  claim_output(path, OutputKind::checkpoint(), /*replace=*/true, "kdp::io::save_checkpoint");
  AtomicFile target(path);
  {
    // Built in memory, then written with plain writes: a full disk is an error
    // here, never a half-closed HDF5 file.
    const nn::StateDict sd = model.state_dict();
    const optim::OptimizerState os = optimizer.state_view();  // written before any step
    size_t bytes = size_t{1} << 20;  // attributes and HDF5's own structures
    for (const auto& [name, t] : sd) bytes += static_cast<size_t>(t.numel()) * sizeof(float);
    for (const auto& [pname, entries] : os.tensors) {
      for (const auto& [key, t] : entries) bytes += static_cast<size_t>(t.numel()) * sizeof(float);
    }
    h5::File f = h5::File::create_in_memory(path, bytes);
    h5::Group m = f.create_group("model");
    for (const auto& [name, t] : sd) write_tensor(m, name, t, name, path);
    write_optimizer(
        f, os, optimizer.parameters(),
        [&](const h5::Group& g, const std::string& pname, const std::string& key, const Tensor& t) {
          write_tensor(g, key, t, fmt::format("optimizer state {}/{}", pname, key), path);
        });
    write_training_state(f, state, sd, model);
    const h5::File::Image image = f.image();
    target.write(image.bytes.get(), image.size);
  }
  target.commit();
}

namespace {

// SlicedCheckpoint's plan: the target, the temporary file and where each state
// tensor's values start in it, as length-prefixed text.
struct SlicePlan {
  std::string target, temp;
  std::map<std::string, int64_t> offsets;  // "<parameter>/<key>"
};

void put_field(std::string& out, const std::string& field) {
  out += fmt::format("{}:", field.size());
  out += field;
}

std::string take_field(std::string_view& in, int rank) {
  const size_t colon = in.find(':');
  uint64_t n = 0;
  KDP_CHECK(colon != std::string_view::npos && parse_u64(in.substr(0, colon), n) &&
                n <= in.size() - colon - 1,
            StateError, "the plan of a sliced checkpoint that rank {} received is cut short", rank);
  std::string field(in.substr(colon + 1, n));
  in.remove_prefix(colon + 1 + n);
  return field;
}

std::string encode(const SlicePlan& p) {
  std::string out;
  put_field(out, p.target);
  put_field(out, p.temp);
  for (const auto& [entry, offset] : p.offsets) {
    put_field(out, entry);
    put_field(out, std::to_string(offset));
  }
  return out;
}

SlicePlan decode(const std::string& text, int rank) {
  std::string_view in(text);
  SlicePlan p;
  p.target = take_field(in, rank);
  p.temp = take_field(in, rank);
  while (!in.empty()) {
    std::string entry = take_field(in, rank);
    uint64_t offset = 0;
    KDP_CHECK(parse_u64(take_field(in, rank), offset), StateError,
              "the plan of sliced checkpoint '{}' has no offset for {}", p.target, entry);
    p.offsets[entry] = static_cast<int64_t>(offset);
  }
  return p;
}

std::string state_entry(const std::string& pname, const std::string& key) {
  return pname + "/" + key;
}

// `size` bytes at `offset` of `fd`; the system's reason on failure.
int write_at(int fd, const char* bytes, size_t size, int64_t offset) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd, bytes + done, size - done, offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : ENOSPC;
    done += static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

SlicedCheckpoint::SlicedCheckpoint(const std::string& path, const nn::Module& model,
                                   const optim::Optimizer& optimizer,
                                   const optim::OptimizerState& layout, const TrainingState& state)
    : path_(path) {
  trace::Region region("kdp::io::SlicedCheckpoint");
  check_state_to_save(state, path);
  claim_output(path, OutputKind::checkpoint(), /*replace=*/true, "kdp::io::SlicedCheckpoint");
  file_ = std::make_unique<AtomicFile>(path);
  SlicePlan plan{path, file_->temp_path(), {}};
  {
    // Written by HDF5 straight to the file (the room for the state is
    // allocated, not written: nothing of the size of the state is held here).
    h5::File f = h5::File::create(file_->temp_path());
    const nn::StateDict sd = model.state_dict();
    {
      h5::Group m = f.create_group("model");
      for (const auto& [name, t] : sd) write_tensor(m, name, t, name, path);
    }
    write_optimizer(
        f, layout, optimizer.parameters(),
        [&](const h5::Group& g, const std::string& pname, const std::string& key, const Tensor&) {
          const Tensor* p = nn::find(optimizer.parameters(), pname);
          KDP_CHECK(p != nullptr, StateError,
                    "optimizer state for unknown parameter '{}'; '{}' was not written", pname,
                    path);
          const std::vector<int64_t> dims = p->shape().to_vector();
          if (p->numel() == 0) {
            g.create_dataset(key, h5::Type::Float32, dims);
            return;
          }
          plan.offsets[state_entry(pname, key)] =
              g.create_dataset_allocated(key, h5::Type::Float32, dims).offset();
        });
    write_training_state(f, state, sd, model);
    f.flush();  // HDF5's structures, or an IOError (a full disk)
    f.close();  // every object above is closed
  }
  plan_ = encode(plan);
}

SlicedCheckpoint::~SlicedCheckpoint() = default;
SlicedCheckpoint::SlicedCheckpoint(SlicedCheckpoint&&) noexcept = default;
SlicedCheckpoint& SlicedCheckpoint::operator=(SlicedCheckpoint&&) noexcept = default;

void SlicedCheckpoint::commit() {
  KDP_CHECK(file_ != nullptr, StateError, "checkpoint '{}' was already committed", path_);
  std::string why;
  KDP_CHECK(is_checkpoint_file(file_->temp_path(), &why), IOError,
            "'{}' was not written: its file does not read back ({})", path_, why);
  file_->commit();
  file_.reset();
}

bool write_state_slices(const std::string& plan_text, const optim::Optimizer& optimizer, int rank,
                        std::string* why) {
  trace::Region region("kdp::io::write_state_slices");
  const SlicePlan plan = decode(plan_text, rank);
  const int fd = ::open(plan.temp.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    if (why != nullptr) {
      *why = fmt::format(
          "rank {} cannot open '{}' to write its slice of the optimizer state into checkpoint "
          "'{}': {} (every rank must see the checkpoint directory on one file system)",
          rank, plan.temp, plan.target, describe_file_error(errno));
    }
    return false;
  }
  struct Closer {
    int fd;
    bool open = true;
    ~Closer() {
      if (open) ::close(fd);
    }
  } closer{fd};
  for (const auto& [pname, entries] : optimizer.own_state_tensors()) {
    const auto [begin, end] = optimizer.owned_range(pname);
    if (begin >= end) continue;
    const Shape shape = nn::find(optimizer.parameters(), pname)->shape();
    for (const auto& [key, t] : entries) {
      const std::string entry = state_entry(pname, key);
      auto at = plan.offsets.find(entry);
      KDP_CHECK(at != plan.offsets.end() && t.numel() == end - begin, StateError,
                "rank {} holds {} values of optimizer state {} for elements [{}, {}), which "
                "checkpoint '{}' has no room for",
                rank, t.numel(), entry, begin, end, plan.target);
      std::vector<float> copy;
      const float* values = t.data();
      if (!compat::host_accessible_memory()) values = (copy = t.to_vector()).data();
      const std::string bad = first_non_finite(values, t.numel(), shape, begin);
      KDP_CHECK(bad.empty(), NumericalError,
                "'optimizer state {}' holds {} (rank {}'s slice); '{}' was not written", entry, bad,
                rank, plan.target);
      const int err = write_at(fd, reinterpret_cast<const char*>(values),
                               static_cast<size_t>(t.numel()) * sizeof(float),
                               at->second + begin * static_cast<int64_t>(sizeof(float)));
      KDP_CHECK(err == 0, IOError, "rank {} cannot write its slice of {} into '{}': {}", rank,
                entry, plan.target, describe_file_error(err));
    }
  }
  int err = ::fsync(fd) == 0 ? 0 : errno;
  closer.open = false;
  if (::close(fd) != 0 && err == 0) err = errno;  // a network file system may report here
  KDP_CHECK(err == 0, IOError, "rank {} cannot sync its slices of '{}' to disk: {}", rank,
            plan.target, describe_file_error(err));
  return true;
}

namespace {

// What loading needs to know before any tensor is read: names and shapes (and,
// read from a file, the open datasets, so that reading them opens nothing again).
struct Layout {
  std::vector<std::pair<std::string, Shape>> model;
  std::string signature;
  std::string optimizer_type;
  std::vector<std::pair<std::string, Shape>> optimizer_state;  // "<parameter>/<key>"
  std::vector<h5::Dataset> model_sets, state_sets;             // in the same orders
};

Layout read_layout(const h5::File& f) {
  Layout l;
  h5::Group m = f.open_group("model");
  for (const std::string& name : m.members()) {
    l.model_sets.push_back(m.open_dataset(name));
    l.model.emplace_back(name, Shape(l.model_sets.back().dims()));
  }
  l.signature = f.attribute_string("model_signature");
  h5::Group o = f.open_group("optimizer");
  l.optimizer_type = o.attribute_string("type");
  h5::Group st = o.open_group("state");
  for (const std::string& pname : st.members()) {
    h5::Group pg = st.open_group(pname);
    for (const std::string& key : pg.members()) {
      l.state_sets.push_back(pg.open_dataset(key));
      l.optimizer_state.emplace_back(pname + "/" + key, Shape(l.state_sets.back().dims()));
    }
  }
  return l;
}

// Every dataset of an opened checkpoint (whose layout was read), into fresh
// tensors, with the optimizer's hyperparameters and the training state.
Checkpoint read_contents(const h5::File& f, const Layout& layout, const std::string& path) {
  Checkpoint c;
  // Members come back sorted by name; the state dict's own order is the model's.
  std::vector<const h5::Dataset*> sets;
  for (const h5::Dataset& d : layout.model_sets) sets.push_back(&d);
  for (const h5::Dataset& d : layout.state_sets) sets.push_back(&d);
  std::vector<Tensor> tensors = read_tensors(sets);
  for (size_t i = 0; i < layout.model.size(); ++i) {
    c.model.emplace_back(layout.model[i].first, std::move(tensors[i]));
  }
  h5::Group o = f.open_group("optimizer");
  c.optimizer.type = layout.optimizer_type;
  for (const auto& [key, text] : o.attributes()) {
    if (key == "type" || key == "parameters") continue;
    c.optimizer.hyperparameters[key] = o.attribute_double(key);
  }
  for (size_t i = 0; i < layout.optimizer_state.size(); ++i) {
    const std::string& entry = layout.optimizer_state[i].first;
    const size_t slash = entry.find('/');
    c.optimizer.tensors[entry.substr(0, slash)][entry.substr(slash + 1)] =
        std::move(tensors[layout.model.size() + i]);
  }
  h5::Group st = o.open_group("state");
  for (const std::string& pname : st.members()) {
    h5::Group pg = st.open_group(pname);
    for (const auto& [key, text] : pg.attributes()) {
      c.optimizer.scalars[pname][key] = pg.attribute_double(key);
    }
  }
  c.state = read_training_state(f, path);
  return c;
}

Layout layout_of(const Checkpoint& c) {
  Layout l;
  for (const auto& [name, t] : c.model) l.model.emplace_back(name, t.shape());
  l.signature = c.state.model_signature;
  l.optimizer_type = c.optimizer.type;
  for (const auto& [pname, entries] : c.optimizer.tensors) {
    for (const auto& [key, t] : entries)
      l.optimizer_state.emplace_back(pname + "/" + key, t.shape());
  }
  return l;
}

std::vector<std::string> layout_mismatches(const Layout& saved, const nn::Module& model,
                                           const optim::Optimizer& optimizer) {
  const nn::StateDict own = model.state_dict();
  auto saved_shape = [&](const std::string& name) -> const Shape* {
    for (const auto& [n, shape] : saved.model) {
      if (n == name) return &shape;
    }
    return nullptr;
  };
  std::vector<std::string> problems;
  for (const auto& [name, t] : own) {
    const Shape* shape = saved_shape(name);
    if (shape == nullptr) {
      problems.push_back(fmt::format("'{}' is missing", name));
    } else if (*shape != t.shape()) {
      problems.push_back(fmt::format("'{}' is {} in the checkpoint but {} in the model", name,
                                     shape->str(), t.shape().str()));
    }
  }
  for (const auto& [name, shape] : saved.model) {
    if (nn::find(own, name) == nullptr)
      problems.push_back(fmt::format("'{}' is not in the model", name));
  }
  if (problems.empty() && saved.signature != model_signature(own)) {
    problems.push_back(fmt::format("model signature {} differs from the model's {}",
                                   saved.signature, model_signature(own)));
  }
  if (saved.optimizer_type != optimizer.type()) {
    problems.push_back(fmt::format("the optimizer state is of {}, not {}", saved.optimizer_type,
                                   optimizer.type()));
  }
  for (const auto& [entry, shape] : saved.optimizer_state) {
    const std::string param = entry.substr(0, entry.find('/'));
    const Tensor* p = nn::find(optimizer.parameters(), param);
    if (p == nullptr) {
      problems.push_back(
          fmt::format("optimizer state '{}' is for no parameter of the optimizer", entry));
    } else if (p->shape() != shape) {
      problems.push_back(fmt::format("optimizer state '{}' is {} but the parameter is {}", entry,
                                     shape.str(), p->shape().str()));
    }
  }
  return problems;
}

[[noreturn]] void does_not_fit(const std::string& path, const std::vector<std::string>& problems) {
  KDP_FAIL(IOError, "checkpoint '{}' does not fit this model: {}", path, fmt::join(problems, "; "));
}

}  // namespace

bool is_checkpoint_file(const std::string& path, std::string* why) {
  try {
    open_checkpoint(path);
    return true;
  } catch (const Error& e) {
    if (why != nullptr) *why = e.what();
    return false;
  }
}

Checkpoint read_checkpoint(const std::string& path) {
  const h5::File f = open_checkpoint(path);
  return read_contents(f, read_layout(f), path);
}

RunConfig model_settings(const nn::Module& model, const optim::Optimizer& optimizer) {
  const nn::StateDict sd = model.state_dict();
  int64_t numel = 0;
  for (const auto& [name, t] : sd) numel += t.numel();
  return {{"parameters", parameters_setting(numel, model_signature(sd))},
          {"optimizer", optimizer.type()}};
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  h5::File f = open_checkpoint(path);
  CheckpointInfo info;
  info.path = path;
  info.state = read_training_state(f, path);
  info.optimizer_type = f.open_group("optimizer").attribute_string("type");
  h5::Group m = f.open_group("model");
  for (const std::string& name : m.members()) {
    const int64_t n =
        checked_numel(m.open_dataset(name).dims(), sizeof(float),
                      fmt::format("kdp::io: checkpoint entry '/model/{}' in '{}'", name, path));
    KDP_CHECK(!__builtin_add_overflow(info.model_numel, n, &info.model_numel), IOError,
              "the model in '{}' claims more values than can be counted", path);
  }
  info.config = info.state.run_config;
  info.recorded_partially = info.config.empty();
  // What every configuration holds can be read off the file itself.
  info.config["parameters"] = parameters_setting(info.model_numel, info.state.model_signature);
  info.config["optimizer"] = info.optimizer_type;
  return info;
}

std::vector<std::string> checkpoint_mismatches(const Checkpoint& c, const nn::Module& model,
                                               const optim::Optimizer& optimizer) {
  std::vector<std::string> problems = layout_mismatches(layout_of(c), model, optimizer);
  // Names and shapes fit: the optimizer's values (hyperparameters in range,
  // finite step counts) must too, before the model takes any tensor.
  if (problems.empty()) {
    for (const std::string& p : optimizer.state_problems(c.optimizer)) {
      problems.push_back("the optimizer state: " + p);
    }
  }
  return problems;
}

TrainingState load_checkpoint(Checkpoint c, const std::string& path, nn::Module& model,
                              optim::Optimizer& optimizer) {
  const std::vector<std::string> problems = checkpoint_mismatches(c, model, optimizer);
  if (!problems.empty()) does_not_fit(path, problems);
  // The checkpoint's tensors were read for this: parameters and optimizer
  // state take their memory instead of a copy.
  model.adopt_state_dict(c.model);
  optimizer.adopt_state_dict(c.optimizer);
  return c.state;
}

TrainingState load_checkpoint(const std::string& path, nn::Module& model,
                              optim::Optimizer& optimizer) {
  // Names, shapes, signature and optimizer state first, from the metadata;
  // then every dataset into fresh tensors; only then does anything change.
  const h5::File f = open_checkpoint(path);
  const Layout layout = read_layout(f);
  const std::vector<std::string> problems = layout_mismatches(layout, model, optimizer);
  if (!problems.empty()) does_not_fit(path, problems);
  return load_checkpoint(read_contents(f, layout, path), path, model, optimizer);
}

}  // namespace kdp::io
