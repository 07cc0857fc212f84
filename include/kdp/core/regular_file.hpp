#pragma once
/// \file
/// Inputs must be regular files: opening a FIFO blocks until a writer comes,
/// and a device or a directory is never what a dataset, checkpoint or
/// configuration path meant. The check looks at the file's type before
/// anything opens it.

#include <string>

namespace kdp {

/// Throws IOError unless `path` is a regular file (or a link to one). The
/// message reads "<who>: cannot open <what>'<path>': <why>", where why is "no
/// such file", "it is a directory", "it is a FIFO (named pipe), not a regular
/// file", "it is a character device, not a regular file", ...; `what` names
/// the kind of input ("IDX file "), or is empty.
void require_regular_file(const std::string& path, const std::string& who,
                          const std::string& what = "");

/// What the existing non-regular file at `path` is ("a directory", "a FIFO
/// (named pipe)", "a character device", ...); empty for a regular file (or a
/// link to one) and for a path where nothing is.
std::string non_regular_type(const std::string& path);

/// Whether `path` exists (as anything, a dangling link included).
bool path_exists(const std::string& path);

}  // namespace kdp
