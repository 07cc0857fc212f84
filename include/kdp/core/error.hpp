#pragma once
/// \file
/// The exception hierarchy. Every error kdp reports derives from kdp::Error, and its
/// message names the tensor, shape, file, device or rank at fault.

#include <stdexcept>
#include <string>

namespace kdp {

/// Base of every exception kdp throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Shapes that do not fit together (binary ops, linear, losses, reshape).
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// Tensors of different devices in one op, or a device that does not exist.
class DeviceError : public Error {
 public:
  using Error::Error;
};

/// A value outside its valid range (a class index, a probability, an option).
class ValueError : public Error {
 public:
  using Error::Error;
};

/// The API used out of order (backward through a freed graph, a second Runtime).
class StateError : public Error {
 public:
  using Error::Error;
};

/// Files: missing, malformed, unwritable; HDF5 and IDX failures.
class IOError : public Error {
 public:
  using Error::Error;
};

/// Collectives and ranks: mismatched models across ranks, timeouts, failed peers.
class CommError : public Error {
 public:
  using Error::Error;
};

/// A NaN or Inf where a finite number was needed.
class NumericalError : public Error {
 public:
  using Error::Error;
};

/// A system error number as the end of a one-line message about a file:
/// "no such file", "permission denied", "it is a directory", ...
std::string describe_file_error(int errno_value);

}  // namespace kdp
