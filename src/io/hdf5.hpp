#pragma once
/// \file
/// Small RAII wrappers over the HDF5 C API: files, groups, datasets,
/// dataspaces, types, attributes and property lists. Every failure becomes a
/// kdp::IOError that names the file and the object and carries HDF5's own
/// explanation; HDF5's error stack is never printed.

#include <hdf5.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kdp::io::h5 {

/// Owns one HDF5 identifier and closes it with the right H5*close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

/// Element types kdp stores (UInt16 and UInt32: token ids and code points of
/// text datasets).
enum class Type { UInt8, UInt16, UInt32, Int64, Float32, Float64, Other };

/// An IEEE half-precision number (numpy's float16), for reading such data as
/// it is: read_rows<Half> gives its bits (HDF5 converts any other number
/// type to it).
struct Half {
  uint16_t bits;
};

class Group;
class Dataset;

/// Attribute access shared by files, groups and datasets.
class Object {
 public:
  Object() = default;
  Object(Handle handle, std::string file, std::string path)
      : handle_(std::move(handle)), file_(std::move(file)), path_(std::move(path)) {}
  hid_t id() const { return handle_.id(); }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

  bool has_attribute(const std::string& name) const;
  void set_attribute(const std::string& name, int64_t value);
  void set_attribute(const std::string& name, double value);
  void set_attribute(const std::string& name, const std::string& value);
  void set_attribute(const std::string& name, const char* value) {
    set_attribute(name, std::string(value));
  }
  /// An attribute holding one string per element.
  void set_attribute(const std::string& name, const std::vector<std::string>& values);
  int64_t attribute_int(const std::string& name) const;
  double attribute_double(const std::string& name) const;
  std::string attribute_string(const std::string& name) const;
  std::vector<std::string> attribute_strings(const std::string& name) const;
  /// Every attribute, by name, as text ("3", "0.5", "train").
  std::vector<std::pair<std::string, std::string>> attributes() const;

 protected:
  Handle handle_;
  std::string file_;
  std::string path_;
};

/// A group (or a file's root group).
class Group : public Object {
 public:
  using Object::Object;
  bool exists(const std::string& name) const;
  Group open_group(const std::string& name) const;
  Group create_group(const std::string& name) const;
  /// Opens the group, creating it (and its parents) when missing.
  Group require_group(const std::string& name) const;
  /// Opens a dataset; `cache_bytes` > 0 sizes its chunk cache (so random rows of
  /// compressed chunks are decompressed once, not once per read).
  Dataset open_dataset(const std::string& name, size_t cache_bytes = 0) const;
  /// A dataset of `dims`; chunked along the first dimension (`chunk_rows` rows)
  /// and deflate-compressed at `deflate` (0: contiguous, no compression).
  Dataset create_dataset(const std::string& name, Type type, const std::vector<int64_t>& dims,
                         int64_t chunk_rows = 0, int deflate = 0) const;
  /// A contiguous dataset of `dims` whose room in the file is allocated now
  /// and never filled: its values are written later into the file's bytes at
  /// Dataset::offset() (by other processes: a sharded optimizer's ranks).
  Dataset create_dataset_allocated(const std::string& name, Type type,
                                   const std::vector<int64_t>& dims) const;
  /// Names of the direct members.
  std::vector<std::string> members() const;
  bool is_group(const std::string& name) const;
};

/// An HDF5 file, on disk or in memory.
class File : public Group {
 public:
  enum class Mode { ReadOnly, ReadWrite };
  static File open(const std::string& path, Mode mode = Mode::ReadOnly);
  /// Creates (truncating any file of that name).
  static File create(const std::string& path);
  /// Creates a file that lives in memory until its image() is written (by an
  /// AtomicFile); `name` is used in messages. Disk errors then surface in that
  /// write as plain IOErrors, and a failed write never leaves HDF5 holding a
  /// half-written file.
  /// `expected_bytes`: about how large the file will grow; the image grows in
  /// steps of that size (at least 1 MiB), so that a large file is not copied
  /// again at every MiB.
  static File create_in_memory(const std::string& name, size_t expected_bytes = 0);
  /// The whole file's bytes (a file created in memory), flushed first.
  struct Image {
    std::unique_ptr<char[]> bytes;  // not zeroed first: HDF5 fills it
    size_t size = 0;
  };
  Image image();
  /// Flushes HDF5's buffers to the operating system.
  void flush();
  /// Closes the file; later use of its objects fails.
  void close();

 private:
  using Group::Group;
};

/// An HDF5 dataset: shape, type, reads and writes.
class Dataset : public Object {
 public:
  using Object::Object;
  std::vector<int64_t> dims() const;
  /// The stored type; other integers (int8 to int32, uint64) as Int64, the
  /// type they are read as.
  Type type() const;
  /// The stored type as numpy names it: "uint8", "int16", "float16", ...,
  /// or "other" (strings, compounds).
  std::string type_name() const;
  /// Rows per chunk (0 for contiguous storage).
  int64_t chunk_rows() const;
  /// Where a contiguous dataset's values start in the file, in bytes (a
  /// dataset from create_dataset_allocated()); IOError when it has no room
  /// allocated yet or is not contiguous.
  int64_t offset() const;
  /// Where the values of a contiguous dataset of the host's float start in
  /// the file, when they can be read as bytes from there: none when the
  /// dataset is chunked, has no room allocated, or stores another type.
  std::optional<int64_t> native_float_offset() const;
  /// Throws IOError when the dataset claims far more data than the file stores
  /// for it (a hostile or corrupt header), before anything is allocated for it:
  /// more than 64 MiB beyond 2048 times its stored (compressed) size.
  void check_plausible() const;
  /// The whole dataset, converted to T.
  template <class T>
  std::vector<T> read_all() const;
  /// The whole dataset, converted to T, into `out` (room for every element).
  template <class T>
  void read_all(T* out) const;
  /// Rows [start, start + count) (along the first dimension), converted to T.
  template <class T>
  void read_rows(int64_t start, int64_t count, T* out) const;
  /// Several row ranges in one read (a union of hyperslabs), in the given order.
  template <class T>
  void read_row_ranges(const std::vector<std::pair<int64_t, int64_t>>& ranges, T* out) const;
  /// Rows [start, start + count), the same values read_rows gives, read from
  /// the stored chunks: HDF5 reads each compressed chunk (on the calling
  /// thread, HDF5 is not thread-safe) and `threads` threads inflate them as
  /// they arrive. Only for datasets chunked by whole rows, stored as T, whose
  /// only filter is deflate; for any other layout it reads nothing and returns
  /// false. A chunk that does not inflate to its size is an IOError.
  template <class T>
  bool read_rows_inflating(int64_t start, int64_t count, T* out, int threads) const;
  template <class T>
  void write_all(const T* data) const;
  template <class T>
  void write_rows(int64_t start, int64_t count, const T* data) const;
};

/// A one-line name of a Type ("uint8", "float32").
const char* to_string(Type type);

/// Keeps HDF5 from printing its error stack (called by every wrapper).
void silence_errors();

}  // namespace kdp::io::h5
