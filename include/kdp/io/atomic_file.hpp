#pragma once
/// \file
/// AtomicFile: a file written under a temporary name in its target directory
/// and renamed into place only when complete (after fsync of the file and the
/// directory). A crash or an error at any moment leaves either the old file or
/// the new one under the target name, never a partial one; an abandoned
/// temporary file is removed by the destructor.

#include <string>

namespace kdp::io {

/// A file written under a temporary name and renamed into place when complete.
class AtomicFile {
 public:
  explicit AtomicFile(std::string target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Where to write now (for a writer that opens the file itself, HDF5's).
  const std::string& temp_path() const { return temp_; }
  const std::string& target() const { return target_; }
  /// Writes the whole contents (a file image, a text) to the temporary file
  /// and syncs it on the same descriptor; errors name the target and the
  /// system's reason ("no space left on the device").
  void write(const void* data, size_t size);
  /// Flushes the temporary file to disk (unless write() did) and renames it
  /// over the target, then syncs the directory.
  void commit();
  bool committed() const { return committed_; }

 private:
  std::string target_;
  std::string temp_;
  bool synced_ = false;
  bool committed_ = false;
};

/// Writes `text` to `path` through an AtomicFile; throws IOError naming the
/// file and the system's reason ("permission denied", "no space left ...").
void write_file_atomically(const std::string& path, const std::string& text);

/// Flushes a file's data to disk (fsync); throws IOError naming it on failure.
void fsync_file(const std::string& path);
/// Flushes a directory entry change (a rename) to disk.
void fsync_directory(const std::string& dir);

}  // namespace kdp::io
