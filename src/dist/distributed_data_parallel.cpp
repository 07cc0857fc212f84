#include "kdp/dist/distributed_data_parallel.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <set>
#include <sstream>

#include "core/check.hpp"
#include "core/tensor_kernels.hpp"
#include "kdp/autograd/engine.hpp"
#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/trace.hpp"

namespace kdp::dist {

namespace {

// One line per parameter and buffer: "p fc1.weight [100, 10]".
std::vector<std::string> signature_lines(const nn::Module& m) {
  std::vector<std::string> lines;
  for (const auto& [name, t] : m.named_parameters()) {
    lines.push_back(fmt::format("parameter {} {}", name, t.shape().str()));
  }
  for (const auto& [name, t] : m.named_buffers()) {
    lines.push_back(fmt::format("buffer {} {}", name, t.shape().str()));
  }
  return lines;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

std::vector<std::string> split_lines(const std::vector<char>& bytes) {
  std::vector<std::string> lines;
  std::string cur;
  for (char c : bytes) {
    if (c == '\n') {
      lines.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return lines;
}

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 Communicator comm, DDPOptions options)
    : Module("DistributedDataParallel"),
      module_(std::move(module)),
      comm_(std::move(comm)),
      options_(options) {
  KDP_CHECK(module_, StateError, "the module is null");
  KDP_CHECK(options_.bucket_cap_mb >= 0.0 && options_.first_bucket_mb > 0.0, ValueError,
            "bucket sizes must be positive (bucket_cap_mb={} (0: chosen), first_bucket_mb={})",
            options_.bucket_cap_mb, options_.first_bucket_mb);
  bucket_cap_mb_ = options_.bucket_cap_mb > 0.0 ? options_.bucket_cap_mb
                   : comm_.nodes() > 1          ? 4.0
                                                : 25.0;
  register_module("module", module_);
  hook_ = options_.comm_hook ? options_.comm_hook : allreduce_hook();
  check_same_model_on_all_ranks();
  broadcast_state();
  for (const auto& [name, p] : module_->named_parameters()) {
    if (p.requires_grad()) params_.emplace_back(name, p);
  }
  build_buckets();
  ready_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) {
    hook_ids_.push_back(Tensor(params_[i].second).add_grad_ready_hook([this, i](Tensor& grad) {
      on_grad_ready(i, grad);
    }));
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (size_t i = 0; i < hook_ids_.size(); ++i) {
    Tensor(params_[i].second).remove_grad_ready_hook(hook_ids_[i]);
  }
}

void DistributedDataParallel::check_same_model_on_all_ranks() {
  const std::vector<std::string> lines = signature_lines(*module_);
  const std::string text = join_lines(lines);
  const uint64_t mine[2] = {fnv1a(text), static_cast<uint64_t>(lines.size())};
  const auto all = comm_.allgather_bytes(mine, sizeof(mine));
  bool same = true;
  for (const auto& bytes : all) same = same && std::memcmp(bytes.data(), mine, sizeof(mine)) == 0;
  if (same) return;

  // Every rank saw the mismatch: exchange the full signatures to name it.
  const auto texts = comm_.allgather_bytes(text.data(), text.size());
  std::vector<std::vector<std::string>> per_rank;
  size_t longest = 0;
  for (const auto& t : texts) {
    per_rank.push_back(split_lines(t));
    longest = std::max(longest, per_rank.back().size());
  }
  for (size_t i = 0; i < longest; ++i) {
    // Group the ranks by what they have at position i.
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    for (size_t r = 0; r < per_rank.size(); ++r) {
      const std::string entry = i < per_rank[r].size() ? per_rank[r][i] : "nothing";
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const auto& g) { return g.first == entry; });
      if (it == groups.end()) {
        groups.push_back({entry, {static_cast<int>(r)}});
      } else {
        it->second.push_back(static_cast<int>(r));
      }
    }
    if (groups.size() == 1) continue;
    std::vector<std::string> parts;
    for (const auto& [entry, ranks] : groups) {
      parts.push_back(fmt::format("{} on {}", entry, rank_list(ranks)));
    }
    KDP_FAIL(CommError,
             "ranks hold different models (checked on rank {} of "
             "{}): entry {} is {}",
             comm_.rank(), comm_.size(), i, fmt::join(parts, " but "));
  }
  KDP_FAIL(CommError, "ranks hold different models");
}

void DistributedDataParallel::broadcast_state() {
  NoGradGuard no_grad;
  for (auto& [name, p] : module_->named_parameters()) {
    Tensor t = p;
    comm_.broadcast(t, 0);
  }
  for (auto& [name, b] : module_->named_buffers()) {
    Tensor t = b;
    comm_.broadcast(t, 0);
  }
}

void DistributedDataParallel::build_buckets() {
  if (params_.empty()) return;
  const Device device = params_[0].second.device();
  for (const auto& [name, p] : params_) {
    KDP_CHECK(p.device() == device, DeviceError,
              "parameter '{}' is on {} but '{}' on {}; keep the "
              "module on one device (wrap DataParallel inside for several)",
              name, p.device().str(), params_[0].first, device.str());
  }
  slot_of_.assign(params_.size(), {0, 0});
  std::vector<GradientBucket::Slot> slots;
  int64_t bytes = 0;
  double cap = options_.first_bucket_mb * 1024.0 * 1024.0;
  auto close = [&] {
    if (slots.empty()) return;
    const size_t index = buckets_.size();
    for (size_t k = 0; k < slots.size(); ++k) slot_of_[slots[k].parameter] = {index, k};
    buckets_.push_back(std::make_unique<GradientBucket>(index, std::move(slots), device));
    slots.clear();
    bytes = 0;
    cap = bucket_cap_mb_ * 1024.0 * 1024.0;
  };
  // Reverse order: the last layers' gradients are final first in backward.
  for (size_t j = params_.size(); j-- > 0;) {
    const Tensor& p = params_[j].second;
    slots.push_back({j, bytes / static_cast<int64_t>(sizeof(float)), p.shape()});
    bytes += p.numel() * static_cast<int64_t>(sizeof(float));
    if (static_cast<double>(bytes) >= cap) close();
  }
  close();
  // Gradients are views into the buckets from the start.
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto [b, k] = slot_of_[i];
    Tensor(params_[i].second).set_grad(buckets_[b]->view(k));
  }
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_layout() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : buckets_) {
    std::vector<std::string> names;
    for (const auto& s : b->slots()) names.push_back(params_[s.parameter].first);
    out.push_back(names);
  }
  return out;
}

void DistributedDataParallel::reset_pass() {
  for (auto& b : buckets_) b->reset();
  std::fill(ready_.begin(), ready_.end(), false);
  next_bucket_ = 0;
  hooks_fired_ = 0;
}

void DistributedDataParallel::on_grad_ready(size_t index, Tensor& grad) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const auto [b, k] = slot_of_[index];
  GradientBucket& bucket = *buckets_[b];
  Tensor slot = bucket.view(k);
  // A gradient that is not the bucket view (after zero_grad(set_to_none)) is
  // copied in once, and the view put back in its place.
  if (grad.data() != slot.data()) {
    slot.copy_(grad);
    Tensor(params_[index].second).set_grad(slot);
  }
  if (!sync_) return;
  ++hooks_fired_;
  mark_ready(index);
}

void DistributedDataParallel::mark_ready(size_t index) {
  if (ready_[index]) return;
  ready_[index] = true;
  GradientBucket& bucket = *buckets_[slot_of_[index].first];
  if (--bucket.pending == 0) bucket.ready_at = std::chrono::steady_clock::now();
  launch_ready_buckets();
}

void DistributedDataParallel::launch_ready_buckets() {
  // Launch in bucket order only, so that every rank issues the same sequence;
  // without overlap, all of them once the last gradient is in.
  if (options_.overlap == DDPOptions::Overlap::Never) {
    for (const auto& b : buckets_) {
      if (b->pending != 0) return;
    }
  }
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_]->pending == 0) {
    GradientBucket& bucket = *buckets_[next_bucket_];
    trace::Region region("kdp::ddp::bucket ready");
    bucket.request = hook_->launch(bucket, comm_);
    bucket.launched = true;
    ++next_bucket_;
  }
  if (next_bucket_ == buckets_.size() && !buckets_.empty()) finish();
}

void DistributedDataParallel::register_comm_hook(std::shared_ptr<CommHook> hook) {
  KDP_CHECK(hook != nullptr, ValueError, "the hook is null");
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  KDP_CHECK(hooks_fired_ == 0 && next_bucket_ == 0, StateError,
            "rank {} is inside a backward whose buckets are being reduced with '{}'; register "
            "'{}' between steps",
            comm_.rank(), hook_->name(), hook->name());
  hook_ = std::move(hook);
}

void DistributedDataParallel::finish() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  trace::Region region("kdp::ddp::finish");
  bool any = false;
  for (const auto& b : buckets_) any = any || b->launched;
  const auto start = std::chrono::steady_clock::now();
  if (any) {
    trace::Region wait("kdp::ddp::reduction wait", "compute");
    for (auto& b : buckets_) {
      if (b->launched) b->request.wait();
    }
  }
  const auto end = std::chrono::steady_clock::now();
  comm_wait_seconds_ += std::chrono::duration<double>(end - start).count();
  if (any && next_bucket_ == buckets_.size()) {
    if (trace::enabled()) {
      for (const auto& b : buckets_) {
        const auto [began, ended] = b->request.times();
        trace::record(fmt::format("bucket {} ready", b->index()), b->ready_at, b->ready_at);
        trace::record(fmt::format("{} bucket {} via {} ({:.2f} MB)", hook_->name(), b->index(),
                                  b->request.route(), static_cast<double>(b->numel()) * 4e-6),
                      began, ended, "comm");
      }
    }
    ++reductions_;
    comm_.watchdog().set_step(reductions_);
    reset_pass();
  }
}

void DistributedDataParallel::check_unused(const std::vector<Tensor>& outputs) {
  const auto leaves = autograd::reachable_leaves(outputs);
  std::set<const TensorImpl*> reached;
  for (const auto& l : leaves) reached.insert(l.get());
  std::vector<size_t> unused;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (reached.count(params_[i].second.impl().get()) == 0) unused.push_back(i);
  }
  if (unused.empty()) return;
  if (!options_.find_unused_parameters) {
    std::vector<std::string> names;
    for (size_t i : unused) names.push_back(params_[i].first);
    KDP_FAIL(StateError,
             "parameters {} took no part in producing the output "
             "on rank {}, so their gradients would never be reduced; pass "
             "find_unused_parameters = true in DDPOptions if that is intended",
             fmt::join(names, ", "), comm_.rank());
  }
  if (!sync_) return;
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  for (size_t i : unused) mark_ready(i);
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  return forward(nn::TensorList{input});
}

Tensor DistributedDataParallel::forward(const nn::TensorList& inputs) {
  {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    if (hooks_fired_ > 0) {
      // A backward reached some parameters but never completed the reduction.
      std::vector<std::string> missing;
      for (size_t i = 0; i < params_.size(); ++i) {
        if (!ready_[i]) missing.push_back(params_[i].first);
      }
      KDP_FAIL(StateError,
               "the previous backward on rank {} gave no gradient "
               "to {}; their reduction cannot complete",
               comm_.rank(), fmt::join(missing, ", "));
    }
  }
  if (options_.broadcast_buffers && comm_.size() > 1) {
    // Synchronised layers' buffers (SyncBatchNorm's statistics) are the same
    // on every rank already.
    std::set<const TensorImpl*> in_sync;
    for (const auto& [prefix, m] : module_->named_modules()) {
      if (!m->synchronizes_replicas()) continue;
      for (const auto& [name, b] : m->named_buffers(false)) in_sync.insert(b.impl().get());
    }
    NoGradGuard no_grad;
    for (auto& [name, b] : module_->named_buffers()) {
      if (in_sync.count(b.impl().get()) != 0) continue;
      Tensor t = b;
      comm_.broadcast(t, 0);
    }
  }
  Tensor out = module_->forward(inputs);
  if (autograd::GradMode::enabled() && out.requires_grad()) check_unused({out});
  return out;
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.sync_) {
  ddp_.sync_ = false;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() {
  ddp_.sync_ = previous_;
}

}  // namespace kdp::dist
