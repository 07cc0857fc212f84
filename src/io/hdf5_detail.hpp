#pragma once
// What the HDF5 wrappers' sources share (private to src/io/).

#include <hdf5.h>

#include <cstdint>
#include <string>

#include "io/hdf5.hpp"

namespace kdp::io::h5::detail {

/// HDF5's explanation of the last failure on this thread (then cleared).
std::string last_error();
/// Throws IOError: "cannot <what> '<object>' in '<file>': <HDF5's reason>".
[[noreturn]] void fail(const std::string& what, const std::string& object, const std::string& file);

/// The HDF5 memory type of T.
template <class T>
hid_t native_of();
template <>
hid_t native_of<uint8_t>();
template <>
hid_t native_of<int64_t>();
template <>
hid_t native_of<float>();
template <>
hid_t native_of<double>();
template <>
hid_t native_of<int8_t>();
template <>
hid_t native_of<uint16_t>();
template <>
hid_t native_of<int16_t>();
template <>
hid_t native_of<uint32_t>();
template <>
hid_t native_of<int32_t>();
template <>
hid_t native_of<Half>();

}  // namespace kdp::io::h5::detail
