#pragma once
/// \file
/// What an HDF5 file holds, as `kdp-data info` shows it: every group and
/// dataset by path, with each dataset's element type and shape and every
/// attribute's value, one per line.

#include <string>

namespace kdp::io {

/// The listing of the HDF5 file at `path`; IOError naming the file when it
/// cannot be opened as HDF5.
std::string hdf5_listing(const std::string& path);

}  // namespace kdp::io
