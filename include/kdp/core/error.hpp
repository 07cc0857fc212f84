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
  /// A message as it stands.
  explicit Error(const std::string& message) : std::runtime_error(message), message_(message) {}
  /// A message from `origin`, the function or class that refused
  /// ("kdp::conv2d", "kdp::optim::SGD"): what() reads "origin: message".
  Error(const std::string& origin, const std::string& message)
      : std::runtime_error(origin.empty() ? message : origin + ": " + message),
        origin_(origin),
        message_(message) {}

  /// Who refused ("kdp::conv2d"); empty for a message as it stands.
  const std::string& origin() const noexcept { return origin_; }
  /// what() without the origin: what a command-line tool shows its user.
  const std::string& message() const noexcept { return message_; }

 private:
  std::string origin_, message_;
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
