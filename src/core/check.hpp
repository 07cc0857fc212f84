#pragma once
// kdp's argument and state checks, one line each, as TORCH_CHECK is PyTorch's.
//
//   KDP_CHECK(n >= 1, ValueError, "asked for {} devices; need at least 1", n);
//
// inside kdp::devices throws ValueError("kdp::devices", "asked for 0 devices;
// need at least 1") (what(): "kdp::devices: asked for ...") unless the
// condition holds. The origin is the function the check stands in (its
// qualified name, without anonymous or detail namespaces; a constructor by its
// class's name), and the message is formatted only when the check fails.
//
//   KDP_CHECK_FOR(op, ...)   the same with the origin given: a helper
//                            checking on behalf of the op that called it
//   KDP_CHECK_FOR(KDP_ORIGIN_NAMED(type_), ...)
//                            a check on behalf of a name known at run time
//                            (a module's or an optimizer's type), in the
//                            namespace of the function it stands in:
//                            "kdp::optim::" + type_ inside kdp::optim
//
// Origins are never typed by hand ("kdp::..." in a check): scripts/lint.sh
// fails on them.
//   KDP_FAIL(ValueError, "unknown hook '{}'", name)
//   KDP_FAIL_FOR(op, ...)    throw unconditionally (after a search found
//                            nothing, in a switch's impossible default)

#include <fmt/format.h>

#include <string>

#include "kdp/core/error.hpp"

namespace kdp::detail {

/// The qualified name of the function in `pretty_function`
/// (__PRETTY_FUNCTION__): "kdp::io::save_checkpoint" from
/// "void kdp::io::save_checkpoint(const string&, ...)"; the function a lambda
/// stands in; without "{anonymous}::" and "detail::"; a constructor as its
/// class ("kdp::train::Trainer").
std::string origin_of(const char* pretty_function);

/// The namespaces of origin_of(pretty_function), with the trailing "::":
/// "kdp::optim::" for kdp::optim::Optimizer::step and for a helper in an
/// anonymous namespace of kdp::optim (kdp's namespaces are lower case, its
/// classes not).
std::string origin_namespace_of(const char* pretty_function);

}  // namespace kdp::detail

#define KDP_ORIGIN_NAMED(name) \
  (::kdp::detail::origin_namespace_of(__PRETTY_FUNCTION__) + std::string(name))

#define KDP_CHECK_FOR(origin, condition, ErrorType, ...)                   \
  do {                                                                     \
    if (!(condition)) throw ErrorType((origin), fmt::format(__VA_ARGS__)); \
  } while (false)

#define KDP_CHECK(condition, ErrorType, ...) \
  KDP_CHECK_FOR(::kdp::detail::origin_of(__PRETTY_FUNCTION__), condition, ErrorType, __VA_ARGS__)

#define KDP_FAIL_FOR(origin, ErrorType, ...) throw ErrorType((origin), fmt::format(__VA_ARGS__))

#define KDP_FAIL(ErrorType, ...) \
  KDP_FAIL_FOR(::kdp::detail::origin_of(__PRETTY_FUNCTION__), ErrorType, __VA_ARGS__)
