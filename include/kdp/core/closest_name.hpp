#pragma once
/// \file
/// "Did you mean ...?": the valid name closest to a mistyped one, for the
/// messages that refuse an unknown option or layer word.

#include <string>
#include <vector>

namespace kdp {

/// How many single-character edits turn `a` into `b`.
size_t edit_distance(const std::string& a, const std::string& b);

/// The candidate closest to `typed` ("--checkpoint_dir" -> "--checkpoint-dir",
/// "conv2d" -> "conv"), or "" when none is close: at most max(3, |typed| / 3)
/// edits away, where a candidate that starts with `typed` (a shortened name)
/// or that `typed` starts with (a word with more after it) counts as one edit
/// when the shorter of the two is longer than 3 characters.
std::string closest_name(const std::string& typed, const std::vector<std::string>& candidates);

}  // namespace kdp
