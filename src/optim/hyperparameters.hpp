#pragma once
// An optimizer's options as the name -> number map that checkpoints store:
// one table per optimizer names each field once, and these two functions map
// both ways for all of them.

#include <map>
#include <string>

namespace kdp::optim::detail {

/// One option: its name in the map, and the member that holds it (a number,
/// or a flag stored as 1 or 0).
template <class Options>
struct Field {
  // Named member-pointer types: nvcc's host code spells `double Options::*x`
  // with parentheses that GCC then warns about.
  using Number = double Options::*;
  using Flag = bool Options::*;
  const char* name;
  Number number = nullptr;
  Flag flag = nullptr;
};

/// The options' fields by name (lr is the optimizer's own, not the table's).
template <class Options, size_t N>
std::map<std::string, double> to_map(const Options& o, const Field<Options> (&fields)[N]) {
  std::map<std::string, double> out;
  for (const Field<Options>& f : fields) {
    out[f.name] = f.number != nullptr ? o.*(f.number) : (o.*(f.flag) ? 1.0 : 0.0);
  }
  return out;
}

/// `o` with the fields `values` names (and lr, else `lr`) taken from it.
template <class Options, size_t N>
Options from_map(Options o, double lr, const std::map<std::string, double>& values,
                 const Field<Options> (&fields)[N]) {
  auto get = [&](const char* key, double fallback) {
    auto it = values.find(key);
    return it == values.end() ? fallback : it->second;
  };
  o.lr = get("lr", lr);
  for (const Field<Options>& f : fields) {
    if (f.number != nullptr) {
      o.*(f.number) = get(f.name, o.*(f.number));
    } else {
      o.*(f.flag) = get(f.name, o.*(f.flag) ? 1.0 : 0.0) != 0.0;
    }
  }
  return o;
}

}  // namespace kdp::optim::detail
