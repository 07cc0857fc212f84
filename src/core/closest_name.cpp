#include "kdp/core/closest_name.hpp"

#include <algorithm>

namespace kdp {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string closest_name(const std::string& typed, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(3, typed.size() / 3) + 1;
  for (const std::string& candidate : candidates) {
    const std::string& shorter = typed.size() < candidate.size() ? typed : candidate;
    const std::string& longer = typed.size() < candidate.size() ? candidate : typed;
    const bool prefix = shorter.size() > 3 && longer.rfind(shorter, 0) == 0;
    const size_t d = prefix ? 1 : edit_distance(typed, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

}  // namespace kdp
