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
  // Each parameter's offset in the concatenation of all of them (flat, in
  // the optimizer's order), its element count and shape.
  struct Place {
    int64_t offset = 0, numel = 0;
    Shape shape;
  };
  std::map<std::string, Place> place;
  int64_t total = 0;
  explicit Shared(Communicator c) : comm(std::move(c)) {}

  // Rank r's elements of the concatenation: [r T / N, (r + 1) T / N).
  std::pair<int64_t, int64_t> slice(int r) const {
    const int64_t n = comm.size();
    return {total * r / n, total * (r + 1) / n};
  }
  // Rank r's range of parameter `name`'s flat elements (empty: none).
  std::pair<int64_t, int64_t> range(const std::string& name, int r) const {
    const Place& p = place.at(name);
    const auto [lo, hi] = slice(r);
    const int64_t begin = std::clamp(lo - p.offset, int64_t{0}, p.numel);
    const int64_t end = std::clamp(hi - p.offset, int64_t{0}, p.numel);
    return {begin, std::max(begin, end)};
  }
};

namespace {

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
  // A tensor's values, in one copy (a state of 100 M values, element by
  // element, took seconds).
  void put_values(const std::vector<float>& v) {
    const auto* p = reinterpret_cast<const char*>(v.data());
    bytes.insert(bytes.end(), p, p + v.size() * sizeof(float));
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
  void get_values(std::vector<float>& v) {
    need(v.size() * sizeof(float));
    if (v.empty()) return;  // an empty slice: its data() may be null
    std::memcpy(v.data(), bytes_.data() + at_, v.size() * sizeof(float));
    at_ += v.size() * sizeof(float);
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
      w.put_values(t.to_vector());
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
      r.get_values(values);
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

namespace {

// Every rank's pieces of each entry of the states in `parts`, put together
// into whole entries of the parameters' shapes.
optim::OptimizerState assemble(const ZeroRedundancyOptimizer::Shared& sh,
                               const std::vector<optim::OptimizerState>& parts) {
  optim::OptimizerState whole = parts.front();
  whole.tensors.clear();
  whole.scalars.clear();
  std::map<std::string, std::map<std::string, std::vector<float>>> values;
  for (size_t r = 0; r < parts.size(); ++r) {
    for (const auto& [name, entries] : parts[r].tensors) {
      const auto [begin, end] = sh.range(name, static_cast<int>(r));
      for (const auto& [key, t] : entries) {
        std::vector<float>& v = values[name][key];
        v.resize(static_cast<size_t>(sh.place.at(name).numel));
        const std::vector<float> piece = t.to_vector();
        KDP_CHECK(static_cast<int64_t>(piece.size()) == end - begin, StateError,
                  "rank {} holds {} elements of '{}/{}', its share is {}", r, piece.size(), name,
                  key, end - begin);
        std::copy(piece.begin(), piece.end(), v.begin() + begin);
      }
    }
    for (const auto& [name, entries] : parts[r].scalars) whole.scalars[name] = entries;
  }
  for (auto& [name, entries] : values) {
    for (auto& [key, v] : entries) {
      whole.tensors[name][key] = Tensor::from_host(v, sh.place.at(name).shape);
    }
  }
  return whole;
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(optim::Optimizer& optimizer, Communicator comm)
    : optimizer_(optimizer), shared_(std::make_shared<Shared>(std::move(comm))) {
  Shared& s = *shared_;
  for (const auto& [name, p] : optimizer.parameters()) {
    s.place[name] = {s.total, p.numel(), p.shape()};
    s.total += p.numel();
  }
  const int me = s.comm.rank();
  std::weak_ptr<Shared> weak = shared_;
  optim::Optimizer* opt = &optimizer_;
  optim::Optimizer::Sharding sharding;
  sharding.range = [weak, me](const std::string& name) {
    auto sh = weak.lock();
    return sh ? sh->range(name, me) : std::pair<int64_t, int64_t>{0, 0};
  };
  // Every rank's updated pieces from it, queued so that the broadcasts of one
  // step travel back to back.
  sharding.after_step = [weak, opt] {
    auto sh = weak.lock();
    if (!sh || sh->comm.size() == 1) return;
    std::vector<Request> sent;
    for (const auto& [name, p] : opt->parameters()) {
      for (int r = 0; r < sh->comm.size(); ++r) {
        const auto [begin, end] = sh->range(name, r);
        if (begin >= end) continue;
        Tensor piece = alias(p, begin, {end - begin}, p.device());
        sent.push_back(sh->comm.ibroadcast(piece, r));
      }
    }
    for (Request& r : sent) r.wait();
  };
  // Onto rank 0 alone (which writes checkpoints): the others never hold more
  // than their share.
  sharding.gather =
      [weak](const optim::OptimizerState& mine) -> std::optional<optim::OptimizerState> {
    auto sh = weak.lock();
    if (!sh) return mine;
    std::vector<optim::OptimizerState> parts;
    if (sh->comm.size() == 1) {
      parts.push_back(mine);
    } else {
      const std::vector<char> bytes = serialize(mine);
      for (const auto& part : sh->comm.gather_bytes(bytes.data(), bytes.size(), 0)) {
        parts.push_back(deserialize(part));
      }
      if (sh->comm.rank() != 0) return std::nullopt;
    }
    return assemble(*sh, parts);
  };
  // Onto rank 0: every rank's keys and scalars (the values stay where they
  // are, for each rank to write its own into a checkpoint).
  sharding.gather_layout =
      [weak](const optim::OptimizerState& mine) -> std::optional<optim::OptimizerState> {
    auto sh = weak.lock();
    if (!sh || sh->comm.size() == 1) return mine;
    optim::OptimizerState bare = mine;
    for (auto& [name, entries] : bare.tensors) {
      for (auto& [key, t] : entries) t = Tensor::empty({0});
    }
    const std::vector<char> bytes = serialize(bare);
    const auto parts = sh->comm.gather_bytes(bytes.data(), bytes.size(), 0);
    if (sh->comm.rank() != 0) return std::nullopt;
    optim::OptimizerState whole = mine;  // the type and hyperparameters are everyone's
    for (const auto& part : parts) {
      const optim::OptimizerState s = deserialize(part);
      for (const auto& [name, entries] : s.tensors) {
        for (const auto& [key, t] : entries) whole.tensors[name][key] = Tensor();
      }
      for (const auto& [name, entries] : s.scalars) whole.scalars[name] = entries;
    }
    return whole;
  };
  optimizer_.set_sharding(std::move(sharding));
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() {
  optimizer_.clear_sharding();
}

std::pair<int64_t, int64_t> ZeroRedundancyOptimizer::range(const std::string& name) const {
  KDP_CHECK(shared_->place.count(name) == 1, ValueError, "'{}' is not a parameter of the optimizer",
            name);
  return shared_->range(name, shared_->comm.rank());
}

int64_t ZeroRedundancyOptimizer::owned_elements() const {
  const auto [lo, hi] = shared_->slice(shared_->comm.rank());
  return hi - lo;
}

int64_t ZeroRedundancyOptimizer::total_elements() const {
  return shared_->total;
}

size_t ZeroRedundancyOptimizer::state_bytes() const {
  return optimizer_.state_bytes();
}

}  // namespace kdp::dist
