#include "io/hdf5.hpp"

#include "io/hdf5_detail.hpp"

#include <fmt/format.h>

#include "core/check.hpp"
#include "kdp/core/checked_size.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>

namespace kdp::io::h5 {

namespace {

bool debugging() {
  static const bool on = std::getenv("KDP_DEBUG") != nullptr;
  return on;
}

}  // namespace

namespace detail {

// HDF5's explanation of the last failure on this thread, innermost first: the
// first line of the two innermost descriptions (all of them with KDP_DEBUG),
// without the file driver's own details (times, flags).
std::string last_error() {
  std::vector<std::string> lines;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        auto* out = static_cast<std::vector<std::string>*>(data);
        if (e->desc == nullptr || *e->desc == '\0') return 0;
        std::string line = e->desc;
        if (!debugging()) {
          line = line.substr(0, line.find('\n'));
          const size_t details = line.find(": time = ");
          if (details != std::string::npos) line.erase(details);
          if (line.rfind("time = ", 0) == 0 || out->size() >= 2) return 0;
          if (!out->empty() && out->back() == line) return 0;
        }
        out->push_back(line);
        return 0;
      },
      &lines);
  H5Eclear2(H5E_DEFAULT);
  if (lines.empty()) return "HDF5 gave no reason";
  return fmt::format("{}", fmt::join(lines, ": "));
}

[[noreturn]] void fail(const std::string& what, const std::string& object,
                       const std::string& file) {
  KDP_FAIL(IOError, "cannot {} '{}' in '{}': {}", what, object, file, last_error());
}

template <>
hid_t native_of<uint8_t>() {
  return H5T_NATIVE_UINT8;
}
template <>
hid_t native_of<int64_t>() {
  return H5T_NATIVE_INT64;
}
template <>
hid_t native_of<float>() {
  return H5T_NATIVE_FLOAT;
}
template <>
hid_t native_of<double>() {
  return H5T_NATIVE_DOUBLE;
}
template <>
hid_t native_of<int8_t>() {
  return H5T_NATIVE_INT8;
}
template <>
hid_t native_of<uint16_t>() {
  return H5T_NATIVE_UINT16;
}
template <>
hid_t native_of<int16_t>() {
  return H5T_NATIVE_INT16;
}
template <>
hid_t native_of<uint32_t>() {
  return H5T_NATIVE_UINT32;
}
template <>
hid_t native_of<int32_t>() {
  return H5T_NATIVE_INT32;
}
template <>
hid_t native_of<Half>() {
  // IEEE binary16 in this machine's byte order, as numpy and h5py store it
  // (HDF5 before 1.14.4 predefines no such type); made once, kept.
  static const hid_t half = [] {
    const hid_t t = H5Tcopy(H5T_NATIVE_FLOAT);
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    H5Tset_precision(t, 16);
    return t;
  }();
  return half;
}

}  // namespace detail

using detail::fail;
using detail::last_error;
using detail::native_of;

namespace {

std::string join_path(const std::string& base, const std::string& name) {
  if (!name.empty() && name[0] == '/') return name;
  if (base.empty() || base == "/") return "/" + name;
  return base + "/" + name;
}

hid_t native(Type t) {
  switch (t) {
    case Type::UInt8:
      return H5T_NATIVE_UINT8;
    case Type::UInt16:
      return H5T_NATIVE_UINT16;
    case Type::UInt32:
      return H5T_NATIVE_UINT32;
    case Type::Int64:
      return H5T_NATIVE_INT64;
    case Type::Float32:
      return H5T_NATIVE_FLOAT;
    case Type::Float64:
      return H5T_NATIVE_DOUBLE;
    case Type::Other:
      break;
  }
  return H5T_NATIVE_FLOAT;
}

Handle string_type() {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.id(), H5T_VARIABLE);
  H5Tset_cset(t.id(), H5T_CSET_UTF8);
  return t;
}

Handle scalar_space() {
  return Handle(H5Screate(H5S_SCALAR), H5Sclose);
}

}  // namespace

void silence_errors() {
  // libhdf5 prints its error stack to stderr by default; kdp reports failures
  // in its own messages, and prints the stack only when KDP_DEBUG asks.
  thread_local bool done = false;
  if (!done) {
    if (!debugging()) H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    done = true;
  }
}

void Handle::reset() {
  if (id_ >= 0 && closer_ != nullptr) closer_(id_);
  id_ = H5I_INVALID_HID;
}

// A switch, as every enum's names in kdp: -Wswitch then names an enumerator
// added without its name, which a shared table could not.
const char* to_string(Type type) {
  switch (type) {
    case Type::UInt8:
      return "uint8";
    case Type::UInt16:
      return "uint16";
    case Type::UInt32:
      return "uint32";
    case Type::Int64:
      return "int64";
    case Type::Float32:
      return "float32";
    case Type::Float64:
      return "float64";
    case Type::Other:
      return "other";
  }
  return "?";
}

// ---- attributes -------------------------------------------------------------------

bool Object::has_attribute(const std::string& name) const {
  silence_errors();
  const htri_t r = H5Aexists(id(), name.c_str());
  if (r < 0) fail("look up attribute " + name + " of", path_, file_);
  return r > 0;
}

namespace {

void write_attribute(const Object& o, const std::string& name, hid_t type, hid_t space,
                     const void* value) {
  silence_errors();
  if (H5Aexists(o.id(), name.c_str()) > 0) H5Adelete(o.id(), name.c_str());
  Handle a(H5Acreate2(o.id(), name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) fail("create attribute " + name + " of", o.path(), o.file());
  if (H5Sget_simple_extent_npoints(space) == 0) return;  // an empty list: nothing to write
  if (H5Awrite(a.id(), type, value) < 0) {
    fail("write attribute " + name + " of", o.path(), o.file());
  }
}

Handle open_attribute(const Object& o, const std::string& name) {
  silence_errors();
  Handle a(H5Aopen(o.id(), name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a.valid()) fail("open attribute " + name + " of", o.path(), o.file());
  return a;
}

}  // namespace

void Object::set_attribute(const std::string& name, int64_t value) {
  write_attribute(*this, name, H5T_NATIVE_INT64, scalar_space().id(), &value);
}

void Object::set_attribute(const std::string& name, double value) {
  write_attribute(*this, name, H5T_NATIVE_DOUBLE, scalar_space().id(), &value);
}

void Object::set_attribute(const std::string& name, const std::string& value) {
  const char* p = value.c_str();
  write_attribute(*this, name, string_type().id(), scalar_space().id(), &p);
}

void Object::set_attribute(const std::string& name, const std::vector<std::string>& values) {
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  const hsize_t n = values.size();
  Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  write_attribute(*this, name, string_type().id(), space.id(), ptrs.data());
}

int64_t Object::attribute_int(const std::string& name) const {
  Handle a = open_attribute(*this, name);
  int64_t v = 0;
  if (H5Aread(a.id(), H5T_NATIVE_INT64, &v) < 0)
    fail("read attribute " + name + " of", path_, file_);
  return v;
}

double Object::attribute_double(const std::string& name) const {
  Handle a = open_attribute(*this, name);
  double v = 0;
  if (H5Aread(a.id(), H5T_NATIVE_DOUBLE, &v) < 0)
    fail("read attribute " + name + " of", path_, file_);
  return v;
}

std::vector<std::string> Object::attribute_strings(const std::string& name) const {
  Handle a = open_attribute(*this, name);
  Handle type(H5Aget_type(a.id()), H5Tclose);
  Handle space(H5Aget_space(a.id()), H5Sclose);
  KDP_CHECK(H5Tget_class(type.id()) == H5T_STRING, IOError,
            "attribute {} of '{}' in '{}' is not text", name, path_, file_);
  const hssize_t n = H5Sget_simple_extent_npoints(space.id());
  std::vector<std::string> out;
  if (n <= 0) return out;
  if (H5Tis_variable_str(type.id()) > 0) {
    std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
    Handle mem = string_type();
    if (H5Aread(a.id(), mem.id(), ptrs.data()) < 0)
      fail("read attribute " + name + " of", path_, file_);
    for (char* p : ptrs) out.emplace_back(p != nullptr ? p : "");
    H5Dvlen_reclaim(mem.id(), space.id(), H5P_DEFAULT, ptrs.data());
  } else {
    const size_t len = H5Tget_size(type.id());
    std::vector<char> buf(len * static_cast<size_t>(n) + 1, '\0');
    if (H5Aread(a.id(), type.id(), buf.data()) < 0)
      fail("read attribute " + name + " of", path_, file_);
    for (hssize_t i = 0; i < n; ++i) {
      std::string s(buf.data() + static_cast<size_t>(i) * len, len);
      s.erase(s.find_last_not_of('\0') + 1);
      out.push_back(s);
    }
  }
  return out;
}

std::string Object::attribute_string(const std::string& name) const {
  auto v = attribute_strings(name);
  return v.empty() ? std::string() : v[0];
}

std::vector<std::pair<std::string, std::string>> Object::attributes() const {
  silence_errors();
  std::vector<std::string> names;
  H5Aiterate2(
      id(), H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* n, const H5A_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->push_back(n);
        return 0;
      },
      &names);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& n : names) {
    Handle a = open_attribute(*this, n);
    Handle type(H5Aget_type(a.id()), H5Tclose);
    switch (H5Tget_class(type.id())) {
      case H5T_INTEGER:
        out.emplace_back(n, std::to_string(attribute_int(n)));
        break;
      case H5T_FLOAT:
        out.emplace_back(n, fmt::format("{}", attribute_double(n)));
        break;
      case H5T_STRING: {
        const auto v = attribute_strings(n);
        out.emplace_back(n, v.size() == 1 ? v[0] : fmt::format("[{}]", fmt::join(v, ", ")));
        break;
      }
      default:
        out.emplace_back(n, "(unsupported type)");
    }
  }
  return out;
}

// ---- groups and files -------------------------------------------------------------------

bool Group::exists(const std::string& name) const {
  silence_errors();
  // Check each component, as H5Lexists needs the parents to exist.
  std::string prefix;
  size_t pos = 0;
  const std::string rel = name[0] == '/' ? name.substr(1) : name;
  while (true) {
    const size_t next = rel.find('/', pos);
    prefix = rel.substr(0, next);
    const htri_t r = H5Lexists(id(), (name[0] == '/' ? "/" + prefix : prefix).c_str(), H5P_DEFAULT);
    if (r <= 0) return false;
    if (next == std::string::npos) return true;
    pos = next + 1;
  }
}

bool Group::is_group(const std::string& name) const {
  silence_errors();
  Handle o(H5Oopen(id(), name.c_str(), H5P_DEFAULT), H5Oclose);
  if (!o.valid()) fail("inspect", join_path(path_, name), file_);
  return H5Iget_type(o.id()) == H5I_GROUP;
}

Group Group::open_group(const std::string& name) const {
  silence_errors();
  Handle g(H5Gopen2(id(), name.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g.valid()) fail("open group", join_path(path_, name), file_);
  return Group(std::move(g), file_, join_path(path_, name));
}

Group Group::create_group(const std::string& name) const {
  silence_errors();
  Handle g(H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!g.valid()) fail("create group", join_path(path_, name), file_);
  return Group(std::move(g), file_, join_path(path_, name));
}

Group Group::require_group(const std::string& name) const {
  if (exists(name)) return open_group(name);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  silence_errors();
  Handle g(H5Gcreate2(id(), name.c_str(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!g.valid()) fail("create group", join_path(path_, name), file_);
  return Group(std::move(g), file_, join_path(path_, name));
}

std::vector<std::string> Group::members() const {
  silence_errors();
  std::vector<std::string> names;
  // H5Literate and H5L_info_t name matching versions in HDF5 1.10 and 1.12+.
  H5Literate(
      id(), H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* n, const H5L_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->push_back(n);
        return 0;
      },
      &names);
  return names;
}

Dataset Group::open_dataset(const std::string& name, size_t cache_bytes) const {
  silence_errors();
  KDP_CHECK(exists(name), IOError, "there is no dataset '{}' in '{}'", join_path(path_, name),
            file_);
  Handle dapl(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
  if (cache_bytes > 0) {
    // A prime number of hash slots, ample for the chunks that fit in the cache.
    H5Pset_chunk_cache(dapl.id(), 100003, cache_bytes, 1.0);
  }
  Handle d(H5Dopen2(id(), name.c_str(), dapl.id()), H5Dclose);
  if (!d.valid()) fail("open dataset", join_path(path_, name), file_);
  return Dataset(std::move(d), file_, join_path(path_, name));
}

Dataset Group::create_dataset(const std::string& name, Type type, const std::vector<int64_t>& dims,
                              int64_t chunk_rows, int deflate) const {
  silence_errors();
  std::vector<hsize_t> d(dims.begin(), dims.end());
  Handle space(H5Screate_simple(static_cast<int>(d.size()), d.data(), nullptr), H5Sclose);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (chunk_rows > 0 && !d.empty() && d[0] > 0) {
    std::vector<hsize_t> chunk = d;
    chunk[0] = std::min<hsize_t>(static_cast<hsize_t>(chunk_rows), d[0]);
    H5Pset_chunk(dcpl.id(), static_cast<int>(chunk.size()), chunk.data());
    if (deflate > 0) H5Pset_deflate(dcpl.id(), static_cast<unsigned>(deflate));
  }
  Handle ds(
      H5Dcreate2(id(), name.c_str(), native(type), space.id(), H5P_DEFAULT, dcpl.id(), H5P_DEFAULT),
      H5Dclose);
  if (!ds.valid()) fail("create dataset", join_path(path_, name), file_);
  return Dataset(std::move(ds), file_, join_path(path_, name));
}

Dataset Group::create_dataset_allocated(const std::string& name, Type type,
                                        const std::vector<int64_t>& dims) const {
  silence_errors();
  std::vector<hsize_t> d(dims.begin(), dims.end());
  Handle space(H5Screate_simple(static_cast<int>(d.size()), d.data(), nullptr), H5Sclose);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_layout(dcpl.id(), H5D_CONTIGUOUS);
  H5Pset_alloc_time(dcpl.id(), H5D_ALLOC_TIME_EARLY);
  H5Pset_fill_time(dcpl.id(), H5D_FILL_TIME_NEVER);
  Handle ds(
      H5Dcreate2(id(), name.c_str(), native(type), space.id(), H5P_DEFAULT, dcpl.id(), H5P_DEFAULT),
      H5Dclose);
  if (!ds.valid()) fail("create dataset", join_path(path_, name), file_);
  return Dataset(std::move(ds), file_, join_path(path_, name));
}

File File::open(const std::string& path, Mode mode) {
  silence_errors();
  // The system's reason first: it says more than HDF5's for missing or
  // unreadable files; and a FIFO or a device is refused before open() can
  // block on it.
  require_regular_file(path, "kdp::io");
  const int fd = ::open(path.c_str(), (mode == Mode::ReadOnly ? O_RDONLY : O_RDWR) | O_NONBLOCK);
  KDP_CHECK(fd >= 0, IOError, "cannot open '{}': {}", path, describe_file_error(errno));
  ::close(fd);
  Handle f(
      H5Fopen(path.c_str(), mode == Mode::ReadOnly ? H5F_ACC_RDONLY : H5F_ACC_RDWR, H5P_DEFAULT),
      H5Fclose);
  if (!f.valid()) {
    const std::string why = last_error();
    KDP_CHECK(H5Fis_hdf5(path.c_str()) != 0, IOError, "cannot open '{}': it is not an HDF5 file",
              path);
    H5Eclear2(H5E_DEFAULT);
    KDP_FAIL(IOError, "cannot open HDF5 file '{}': {}", path, why);
  }
  return File(std::move(f), path, "/");
}

File File::create(const std::string& path) {
  silence_errors();
  Handle f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  KDP_CHECK(f.valid(), IOError, "cannot create HDF5 file '{}': {}", path, last_error());
  return File(std::move(f), path, "/");
}

File File::create_in_memory(const std::string& name, size_t expected_bytes) {
  silence_errors();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_core(fapl.id(), std::max(size_t{1} << 20, expected_bytes), /*backing_store=*/0);
  // HDF5's in-memory driver reads a file of the name it is given, when there
  // is one, before truncating its copy (a whole checkpoint about to be
  // replaced): it is given a name below `name`, which no file can have.
  const std::string never_a_file = name + "/in-memory";
  Handle f(H5Fcreate(never_a_file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id()), H5Fclose);
  KDP_CHECK(f.valid(), IOError, "cannot create in-memory HDF5 file '{}': {}", name, last_error());
  return File(std::move(f), name, "/");
}

File::Image File::image() {
  silence_errors();
  if (H5Fflush(id(), H5F_SCOPE_GLOBAL) < 0) fail("flush", "/", file_);
  const ssize_t size = H5Fget_file_image(id(), nullptr, 0);
  if (size < 0) fail("take the image of", "/", file_);
  Image out{std::unique_ptr<char[]>(new char[static_cast<size_t>(size)]),
            static_cast<size_t>(size)};
  if (H5Fget_file_image(id(), out.bytes.get(), out.size) < 0) {
    fail("take the image of", "/", file_);
  }
  return out;
}

void File::flush() {
  silence_errors();
  if (H5Fflush(id(), H5F_SCOPE_GLOBAL) < 0) fail("flush", "/", file_);
}

void File::close() {
  handle_.reset();
}

// ---- datasets --------------------------------------------------------------------------

std::vector<int64_t> Dataset::dims() const {
  silence_errors();
  Handle space(H5Dget_space(id()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.id());
  if (rank < 0) fail("read the shape of", path_, file_);
  std::vector<hsize_t> d(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.id(), d.data(), nullptr);
  return std::vector<int64_t>(d.begin(), d.end());
}

int64_t Dataset::chunk_rows() const {
  silence_errors();
  Handle dcpl(H5Dget_create_plist(id()), H5Pclose);
  if (H5Pget_layout(dcpl.id()) != H5D_CHUNKED) return 0;
  std::vector<hsize_t> chunk(dims().size());
  if (H5Pget_chunk(dcpl.id(), static_cast<int>(chunk.size()), chunk.data()) < 0) return 0;
  return chunk.empty() ? 0 : static_cast<int64_t>(chunk[0]);
}

int64_t Dataset::offset() const {
  silence_errors();
  const haddr_t at = H5Dget_offset(id());
  KDP_CHECK(at != HADDR_UNDEF, IOError,
            "dataset '{}' in '{}' has no contiguous room allocated in the file", path_, file_);
  return static_cast<int64_t>(at);
}

std::optional<int64_t> Dataset::native_float_offset() const {
  silence_errors();
  Handle dcpl(H5Dget_create_plist(id()), H5Pclose);
  if (H5Pget_layout(dcpl.id()) != H5D_CONTIGUOUS || H5Pget_external_count(dcpl.id()) != 0) {
    return std::nullopt;
  }
  Handle t(H5Dget_type(id()), H5Tclose);
  if (H5Tequal(t.id(), H5T_NATIVE_FLOAT) <= 0) return std::nullopt;
  hsize_t values = 1;
  for (int64_t x : dims()) values *= static_cast<hsize_t>(x);
  const haddr_t at = H5Dget_offset(id());
  if (at == HADDR_UNDEF || H5Dget_storage_size(id()) != values * sizeof(float)) {
    return std::nullopt;
  }
  return static_cast<int64_t>(at);
}

void Dataset::check_plausible() const {
  silence_errors();
  size_t logical = 0;
  const std::vector<int64_t> d = dims();
  Handle t(H5Dget_type(id()), H5Tclose);
  unsigned __int128 total = H5Tget_size(t.id());
  for (int64_t x : d) total *= static_cast<unsigned __int128>(x);
  const unsigned __int128 stored = H5Dget_storage_size(id());
  // Deflate cannot compress by more than about 1032:1; an unwritten (fill
  // value) region stores nothing, so allow a fixed margin too.
  const unsigned __int128 limit = stored * 2048 + (static_cast<unsigned __int128>(64) << 20);
  if (total > limit) {
    logical = total > SIZE_MAX ? SIZE_MAX : static_cast<size_t>(total);
    KDP_FAIL(IOError,
             "'{}' in '{}' claims {} bytes of data ([{}]) but the file "
             "stores {} bytes for it; refusing to read it",
             path_, file_, logical, fmt::join(d, ", "), static_cast<uint64_t>(stored));
  }
  // Contiguous and compact data is stored whole, or not at all (fill values):
  // a part of it is a corrupt header, which HDF5 itself would read past.
  Handle dcpl(H5Dget_create_plist(id()), H5Pclose);
  KDP_CHECK(H5Pget_layout(dcpl.id()) == H5D_CHUNKED || stored == 0 || stored >= total, IOError,
            "'{}' in '{}' claims {} bytes of data ([{}]) stored in one piece but the "
            "file stores {} bytes for it; refusing to read it",
            path_, file_, static_cast<uint64_t>(total), fmt::join(d, ", "),
            static_cast<uint64_t>(stored));
}

Type Dataset::type() const {
  silence_errors();
  Handle t(H5Dget_type(id()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(t.id());
  const size_t size = H5Tget_size(t.id());
  if (cls == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(t.id()) == H5T_SGN_2;
    if (size == 1 && !is_signed) return Type::UInt8;
    if (size == 2 && !is_signed) return Type::UInt16;
    if (size == 4 && !is_signed) return Type::UInt32;
    if (size == 8 && is_signed) return Type::Int64;
    if (size <= 8) return Type::Int64;  // other integers convert to int64
  }
  if (cls == H5T_FLOAT) return size == 4 ? Type::Float32 : Type::Float64;
  return Type::Other;
}

std::string Dataset::type_name() const {
  silence_errors();
  Handle t(H5Dget_type(id()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(t.id());
  const size_t bits = 8 * H5Tget_size(t.id());
  if (cls == H5T_INTEGER) {
    return fmt::format("{}int{}", H5Tget_sign(t.id()) == H5T_SGN_2 ? "" : "u", bits);
  }
  if (cls == H5T_FLOAT && bits == 16) {
    // numpy's float16 is IEEE half; a 16-bit float of another layout is not.
    size_t sign = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
    H5Tget_fields(t.id(), &sign, &epos, &esize, &mpos, &msize);
    if (esize == 5 && msize == 10 && H5Tget_ebias(t.id()) == 15) return "float16";
    if (esize == 8 && msize == 7) return "bfloat16";
    return "other";
  }
  if (cls == H5T_FLOAT) return fmt::format("float{}", bits);
  return "other";
}

template <class T>
std::vector<T> Dataset::read_all() const {
  check_plausible();
  const int64_t n =
      checked_numel(dims(), sizeof(T), fmt::format("kdp::io: '{}' in '{}'", path_, file_));
  std::vector<T> out(static_cast<size_t>(n));
  if (n > 0) read_all(out.data());
  return out;
}

template <class T>
void Dataset::read_all(T* out) const {
  check_plausible();
  if (H5Dread(id(), native_of<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) {
    fail("read", path_, file_);
  }
}

template <class T>
void Dataset::read_rows(int64_t start, int64_t count, T* out) const {
  read_row_ranges<T>({{start, count}}, out);
}

template <class T>
void Dataset::read_row_ranges(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                              T* out) const {
  silence_errors();
  const std::vector<int64_t> d = dims();
  KDP_CHECK(!d.empty(), IOError, "'{}' in '{}' is a scalar", path_, file_);
  Handle file_space(H5Dget_space(id()), H5Sclose);
  H5Sselect_none(file_space.id());
  std::vector<hsize_t> start(d.size(), 0), count(d.begin(), d.end());
  hsize_t rows = 0;
  for (const auto& [first, n] : ranges) {
    KDP_CHECK(first >= 0 && n >= 0 && first + n <= d[0], IOError,
              "rows [{}, {}) are outside '{}' ({} rows) in '{}'", first, first + n, path_, d[0],
              file_);
    if (n == 0) continue;
    start[0] = static_cast<hsize_t>(first);
    count[0] = static_cast<hsize_t>(n);
    H5Sselect_hyperslab(file_space.id(), H5S_SELECT_OR, start.data(), nullptr, count.data(),
                        nullptr);
    rows += static_cast<hsize_t>(n);
  }
  if (rows == 0) return;
  std::vector<hsize_t> mem_dims(d.begin(), d.end());
  mem_dims[0] = rows;
  Handle mem_space(H5Screate_simple(static_cast<int>(mem_dims.size()), mem_dims.data(), nullptr),
                   H5Sclose);
  if (H5Dread(id(), native_of<T>(), mem_space.id(), file_space.id(), H5P_DEFAULT, out) < 0) {
    fail("read rows of", path_, file_);
  }
}

template <class T>
void Dataset::write_all(const T* data) const {
  silence_errors();
  if (H5Dwrite(id(), native_of<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
    fail("write", path_, file_);
  }
}

template <class T>
void Dataset::write_rows(int64_t start_row, int64_t count_rows, const T* data) const {
  silence_errors();
  const std::vector<int64_t> d = dims();
  Handle file_space(H5Dget_space(id()), H5Sclose);
  std::vector<hsize_t> start(d.size(), 0), count(d.begin(), d.end());
  start[0] = static_cast<hsize_t>(start_row);
  count[0] = static_cast<hsize_t>(count_rows);
  H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, start.data(), nullptr, count.data(),
                      nullptr);
  Handle mem_space(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr),
                   H5Sclose);
  if (H5Dwrite(id(), native_of<T>(), mem_space.id(), file_space.id(), H5P_DEFAULT, data) < 0) {
    fail("write rows of", path_, file_);
  }
}

#define KDP_H5_INSTANTIATE(T)                                                                    \
  template std::vector<T> Dataset::read_all<T>() const;                                          \
  template void Dataset::read_all<T>(T*) const;                                                  \
  template void Dataset::read_rows<T>(int64_t, int64_t, T*) const;                               \
  template void Dataset::read_row_ranges<T>(const std::vector<std::pair<int64_t, int64_t>>&, T*) \
      const;                                                                                     \
  template void Dataset::write_all<T>(const T*) const;                                           \
  template void Dataset::write_rows<T>(int64_t, int64_t, const T*) const;
KDP_H5_INSTANTIATE(uint8_t)
KDP_H5_INSTANTIATE(int64_t)
KDP_H5_INSTANTIATE(float)
KDP_H5_INSTANTIATE(double)
KDP_H5_INSTANTIATE(int8_t)
KDP_H5_INSTANTIATE(uint16_t)
KDP_H5_INSTANTIATE(int16_t)
KDP_H5_INSTANTIATE(uint32_t)
KDP_H5_INSTANTIATE(int32_t)
KDP_H5_INSTANTIATE(Half)
#undef KDP_H5_INSTANTIATE

}  // namespace kdp::io::h5
