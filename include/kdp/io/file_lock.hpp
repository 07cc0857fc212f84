#pragma once
/// \file
/// FileLock: an advisory lock (flock) on a file, held by this process for the
/// lock's lifetime. The kernel releases it when the process ends in any way,
/// a SIGKILL included, so a killed run never leaves a path locked. Trainers
/// hold one on their checkpoint directory and one on their metrics file, so
/// that two runs never write the same files at once.
///
/// Some file systems have no working locks: Lustre mounted without `flock`
/// answers "function not implemented", NFS without a lock manager "no locks
/// available". try_acquire() reports that (unsupported()), and callers refuse
/// to go on unless told to run without locks. NFS mounted with `nolock` keeps
/// locks local to each client: no error, but no protection across nodes.

#include <string>

namespace kdp::io {

/// An advisory lock on one file; move-only.
class FileLock {
 public:
  FileLock() = default;
  ~FileLock();
  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  /// Opens `path` read-write (creating it, mode 0644, when missing) and tries
  /// to lock it without waiting. Throws IOError when the file cannot be opened
  /// or is not a regular file; otherwise check held(), busy() and
  /// unsupported(). A lock taken is on the file the path names now: one
  /// removed or replaced meanwhile is opened again.
  static FileLock try_acquire(const std::string& path);

  bool held() const { return held_; }
  /// Another process holds the lock.
  bool busy() const { return !held_ && error_ == kBusy; }
  /// The file system cannot lock (see the file comment); reason() says how.
  bool unsupported() const { return !held_ && error_ != 0 && error_ != kBusy; }
  /// Why the lock was not taken, as the system says it.
  std::string reason() const;
  /// Whether try_acquire() created the file.
  bool created() const { return created_; }
  const std::string& path() const { return path_; }
  /// The open file (read-write), valid while the FileLock lives; -1 for none.
  int fd() const { return fd_; }

  /// Replaces the file's contents with one line naming this process: "pid P on
  /// host H, started T" (what owner() reads back).
  void record_owner() const;
  /// The owner line of a lock file written by record_owner(), or "" when it
  /// holds none.
  static std::string owner(const std::string& path);
  /// The process holding a lock on `path`, looked up in /proc/locks: "pid P on
  /// host H, started T"; "" when it is not on this host (or /proc/locks
  /// cannot tell).
  static std::string holder(const std::string& path);

  /// Removes the file when the lock is released (for lock files that exist
  /// only while a run holds them, and for a file created for a run that did
  /// not start).
  void remove_when_released(bool remove) { remove_ = remove; }

  /// Closes the file, releasing the lock (removing the file first when asked
  /// and the lock is held).
  void release();

 private:
  static constexpr int kBusy = -1;
  std::string path_;
  int fd_ = -1;
  bool held_ = false;
  bool created_ = false;
  bool remove_ = false;
  int error_ = 0;  // kBusy, an errno of flock(), or 0
};

}  // namespace kdp::io
