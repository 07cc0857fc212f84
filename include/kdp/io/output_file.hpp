#pragma once
/// \file
/// The one rule for every file kdp writes (checkpoints, datasets, metrics,
/// traces, status files, plots): a path kdp cannot write is refused as
/// unwritable, and an existing file is replaced only when it is kdp's own kind
/// of file and the user asked for it (`--overwrite`). Anything else at the
/// path, a user's dataset above all, is refused with one line that names the
/// file and what it is; nothing is ever written into it.

#include <functional>
#include <string>

#include "kdp/core/error.hpp"

namespace kdp::io {

/// claim_output()'s refusal of a file that is not of the kind to be written
/// there (a user's dataset where a trace belongs): never replaced, whatever
/// the options say.
class ForeignFileError : public IOError {
 public:
  using IOError::IOError;
};

/// One kind of file kdp writes, and how kdp recognises an existing one.
struct OutputKind {
  /// As messages name it: "trace file", "checkpoint".
  std::string name;
  /// Whether the existing regular file at a path is of this kind (written by kdp).
  std::function<bool(const std::string& path)> recognises;

  /// An HDF5 file whose format attribute says "kdp-checkpoint".
  static OutputKind checkpoint();
  /// An HDF5 file whose format attribute says "kdp-dataset" (kdp-data's output).
  static OutputKind dataset();
  /// A Chrome trace that kdp wrote (its otherData names kdp-trace first).
  static OutputKind trace();
  /// kdp-train's --status-file: one line holding an exit status.
  static OutputKind status();
  /// A PNG image of kdp's metrics (its Software text names kdp).
  static OutputKind plot();
};

/// The first bytes kdp writes to a trace file, by which trace() knows it.
constexpr const char* kTracePrefix = "{\"otherData\":{\"format\":\"kdp-trace\"";
/// The Software text of the plots kdp draws, by which plot() knows them.
constexpr const char* kPlotSoftware = "kdp plot_metrics";

/// Applies the rule to `path` before anything is written there. Returns
/// whether a file of `kind` is there (and will be replaced); throws IOError
/// ("<who>: ...", one line) when
///  - the path's directory is missing or takes no new files (kdp writes beside
///    the target and renames), or the path is not a regular file;
///  - a file is there that is not of `kind`, whatever `replace` says
///    (ForeignFileError);
///  - a file of `kind` is there and `replace` is false: the message tells to
///    use another path or `how_to_replace`.
bool claim_output(const std::string& path, const OutputKind& kind, bool replace,
                  const std::string& who, const std::string& how_to_replace = "--overwrite");

/// What is at `path`, in a few words for messages: "a kdp dataset (HDF5)", "a
/// kdp checkpoint (HDF5)", "an HDF5 file", "a PNG image", "a JSON file", "a
/// text file", "an empty file", "a directory", "nothing".
std::string describe_path(const std::string& path);

}  // namespace kdp::io
