#pragma once
// What kdp's importers share: one import as a transaction (the rules of
// ImportOptions::existing, a temporary file renamed into place when whole, a
// full disk named), and the check for SIGINT/SIGTERM between blocks.

#include <functional>
#include <string>
#include <vector>

#include "io/hdf5.hpp"
#include "kdp/data/importer.hpp"

namespace kdp::data::detail {

/// Creates `out` (or a copy of the existing kdp dataset, as `options` allow
/// for `splits`), lets `write` fill it, and renames it into place.
void import_splits(const std::vector<std::string>& splits, const std::string& out,
                   const ImportOptions& options, const std::function<void(io::h5::File&)>& write);

/// An IOError when a stop signal arrived during the import into `out`.
void check_interrupted(const std::string& out);

}  // namespace kdp::data::detail
