#include "kdp/dist/zero_redundancy_optimizer.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>

#include "core/check.hpp"
#include "kdp/core/error.hpp"

namespace kdp::dist {

struct ZeroRedundancyOptimizer::Shared {
  Communicator comm;
  std::map<std::string, int> owner;
  int64_t owned = 0, total = 0;
  explicit Shared(Communicator c) : comm(std::move(c)) {}
};

namespace {

// Whole parameters to ranks, the largest first, each to the rank with the
// fewest elements so far (the lowest such rank): the same on every rank.
std::map<std::string, int> partition(const optim::NamedParameters& params, int ranks) {
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return params[a].second.numel() > params[b].second.numel();
  });
  std::vector<int64_t> load(static_cast<size_t>(ranks), 0);
  std::map<std::string, int> owner;
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    owner[params[i].first] = static_cast<int>(least);
    load[static_cast<size_t>(least)] += params[i].second.numel();
  }
  return owner;
}

// The byte stream of serialize(): sizes, names and values in order.
class Writer {
 public:
  template <class T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const char*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void put(const std::string& s) {
    put(static_cast<uint64_t>(s.size()));
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  std::vector<char> bytes;
};

class Reader {
 public:
  explicit Reader(const std::vector<char>& b) : bytes_(b) {}
  template <class T>
  T get() {
    T v;
    need(sizeof(T));
    std::memcpy(&v, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string get_string() {
    const auto n = static_cast<size_t>(get<uint64_t>());
    need(n);
    std::string s(bytes_.data() + at_, n);
    at_ += n;
    return s;
  }
  void need(size_t n) const {
    KDP_CHECK(at_ + n <= bytes_.size(), StateError,
              "a gathered optimizer state ends after {} of {} bytes", bytes_.size(), at_ + n);
  }

 private:
  const std::vector<char>& bytes_;
  size_t at_ = 0;
};

}  // namespace

std::vector<char> serialize(const optim::OptimizerState& state) {
  Writer w;
  w.put(state.type);
  w.put(static_cast<uint64_t>(state.hyperparameters.size()));
  for (const auto& [k, v] : state.hyperparameters) {
    w.put(k);
    w.put(v);
  }
  w.put(static_cast<uint64_t>(state.tensors.size()));
  for (const auto& [name, entries] : state.tensors) {
    w.put(name);
    w.put(static_cast<uint64_t>(entries.size()));
    for (const auto& [key, t] : entries) {
      w.put(key);
      const std::vector<int64_t> dims = t.shape().to_vector();
      w.put(static_cast<uint64_t>(dims.size()));
      for (int64_t d : dims) w.put(d);
      for (float v : t.to_vector()) w.put(v);
    }
  }
  w.put(static_cast<uint64_t>(state.scalars.size()));
  for (const auto& [name, entries] : state.scalars) {
    w.put(name);
    w.put(static_cast<uint64_t>(entries.size()));
    for (const auto& [key, v] : entries) {
      w.put(key);
      w.put(v);
    }
  }
  return std::move(w.bytes);
}

optim::OptimizerState deserialize(const std::vector<char>& bytes) {
  Reader r(bytes);
  optim::OptimizerState s;
  s.type = r.get_string();
  for (auto n = r.get<uint64_t>(); n > 0; --n) {
    std::string k = r.get_string();
    s.hyperparameters[k] = r.get<double>();
  }
  for (auto n = r.get<uint64_t>(); n > 0; --n) {
    const std::string name = r.get_string();
    for (auto m = r.get<uint64_t>(); m > 0; --m) {
      const std::string key = r.get_string();
      std::vector<int64_t> dims(static_cast<size_t>(r.get<uint64_t>()));
      for (int64_t& d : dims) d = r.get<int64_t>();
      const Shape shape(dims);
      std::vector<float> values(static_cast<size_t>(shape.numel()));
      for (float& v : values) v = r.get<float>();
      s.tensors[name][key] = Tensor::from_host(values, shape);
    }
  }
  for (auto n = r.get<uint64_t>(); n > 0; --n) {
    const std::string name = r.get_string();
    for (auto m = r.get<uint64_t>(); m > 0; --m) {
      std::string key = r.get_string();
      s.scalars[name][key] = r.get<double>();
    }
  }
  return s;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(optim::Optimizer& optimizer, Communicator comm)
    : optimizer_(optimizer), shared_(std::make_shared<Shared>(std::move(comm))) {
  Shared& s = *shared_;
  s.owner = partition(optimizer.parameters(), s.comm.size());
  const int me = s.comm.rank();
  for (const auto& [name, p] : optimizer.parameters()) {
    s.total += p.numel();
    if (s.owner.at(name) == me) s.owned += p.numel();
  }
  std::weak_ptr<Shared> weak = shared_;
  optim::Optimizer* opt = &optimizer_;
  optim::Optimizer::Sharding sharding;
  sharding.owns = [weak, me](const std::string& name) {
    auto sh = weak.lock();
    return !sh || sh->owner.at(name) == me;
  };
  // Every parameter from the rank that updated it, queued so that the
  // broadcasts of one step travel back to back.
  sharding.after_step = [weak, opt] {
    auto sh = weak.lock();
    if (!sh || sh->comm.size() == 1) return;
    std::vector<Request> sent;
    for (const auto& [name, p] : opt->parameters()) {
      Tensor t = p;
      sent.push_back(sh->comm.ibroadcast(t, sh->owner.at(name)));
    }
    for (Request& r : sent) r.wait();
  };
  sharding.gather = [weak](const optim::OptimizerState& mine) {
    auto sh = weak.lock();
    if (!sh || sh->comm.size() == 1) return mine;
    const std::vector<char> bytes = serialize(mine);
    optim::OptimizerState whole = mine;
    for (const std::vector<char>& part : sh->comm.allgather_bytes(bytes.data(), bytes.size())) {
      const optim::OptimizerState theirs = deserialize(part);
      for (const auto& [name, entries] : theirs.tensors) whole.tensors[name] = entries;
      for (const auto& [name, entries] : theirs.scalars) whole.scalars[name] = entries;
    }
    return whole;
  };
  optimizer_.set_sharding(std::move(sharding));
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() {
  optimizer_.clear_sharding();
}

int ZeroRedundancyOptimizer::owner(const std::string& name) const {
  const auto it = shared_->owner.find(name);
  KDP_CHECK(it != shared_->owner.end(), ValueError, "'{}' is not a parameter of the optimizer",
            name);
  return it->second;
}

int64_t ZeroRedundancyOptimizer::owned_elements() const {
  return shared_->owned;
}

int64_t ZeroRedundancyOptimizer::total_elements() const {
  return shared_->total;
}

size_t ZeroRedundancyOptimizer::state_bytes() const {
  size_t bytes = 0;
  const int me = shared_->comm.rank();
  for (const auto& [name, entries] : optimizer_.state_dict().tensors) {
    if (shared_->owner.at(name) != me) continue;  // gathered for a checkpoint
    for (const auto& [key, t] : entries) bytes += static_cast<size_t>(t.numel()) * sizeof(float);
  }
  return bytes;
}

}  // namespace kdp::dist
