#include "npy.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/check.hpp"
#include "kdp/core/checked_size.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/regular_file.hpp"

namespace kdp::data::detail {

std::string NpyHeader::dtype() const {
  if (kind == 'b') return "bool";
  const int bits = 8 * item_bytes;
  if (kind == 'f') return fmt::format("float{}", bits);
  return fmt::format("{}int{}", kind == 'u' ? "u" : "", bits);
}

uint64_t NpyHeader::row_bytes() const {
  uint64_t n = static_cast<uint64_t>(item_bytes);
  for (size_t k = 1; k < shape.size(); ++k) n *= static_cast<uint64_t>(shape[k]);
  return n;
}

// Bytes read in order: a plain file from an offset, or a deflated zip member.
struct NpyReader::Source {
  std::FILE* file = nullptr;
  std::string path;
  bool deflated = false;
  z_stream z{};
  std::vector<unsigned char> in;
  uint64_t compressed_left = 0;

  ~Source() {
    if (deflated) inflateEnd(&z);
    if (file != nullptr) std::fclose(file);
  }

  // Exactly n bytes, or how many there were.
  size_t read(void* out, size_t n) {
    if (!deflated) return std::fread(out, 1, n, file);
    z.next_out = static_cast<Bytef*>(out);
    z.avail_out = static_cast<uInt>(n);
    while (z.avail_out > 0) {
      if (z.avail_in == 0 && compressed_left > 0) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(in.size(), compressed_left));
        const size_t got = std::fread(in.data(), 1, want, file);
        if (got == 0) break;
        compressed_left -= got;
        z.next_in = in.data();
        z.avail_in = static_cast<uInt>(got);
      }
      const int r = inflate(&z, Z_NO_FLUSH);
      KDP_CHECK_FOR(KDP_ORIGIN_NAMED("NpyReader"), r == Z_OK || r == Z_STREAM_END, IOError,
                    "'{}' is corrupt: {}", path, z.msg != nullptr ? z.msg : "inflate failed");
      if (r == Z_STREAM_END) break;
    }
    return n - z.avail_out;
  }
};

namespace {

uint64_t le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int k = bytes - 1; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}

void read_at(std::FILE* f, uint64_t offset, void* out, size_t n, const std::string& path,
             const char* what) {
  KDP_CHECK_FOR(
      KDP_ORIGIN_NAMED("NpyReader"),
      std::fseek(f, static_cast<long>(offset), SEEK_SET) == 0 && std::fread(out, 1, n, f) == n,
      IOError, "'{}' is not a zip archive of arrays (its {} cannot be read)", path, what);
}

// Where the member `name` of the zip archive starts, its method, and its
// compressed size (zip64 included, as np.savez writes large members).
struct Member {
  uint64_t data = 0, compressed = 0;
  int method = 0;
};

Member find_member(std::FILE* f, const std::string& path, const std::string& name) {
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("NpyReader"), std::fseek(f, 0, SEEK_END) == 0, IOError,
                "cannot read '{}'", path);
  const auto size = static_cast<uint64_t>(std::ftell(f));
  const uint64_t tail = std::min<uint64_t>(size, 65557);
  std::vector<unsigned char> end(static_cast<size_t>(tail));
  read_at(f, size - tail, end.data(), end.size(), path, "end");
  size_t at = end.size() < 22 ? 0 : end.size() - 22 + 1;
  while (at-- > 0 && le(&end[at], 4) != 0x06054b50u) {
  }
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("NpyReader"), at < end.size(), IOError,
                "'{}' is not a zip archive of arrays (.npz): no end of central directory", path);
  uint64_t entries = le(&end[at + 10], 2), cd = le(&end[at + 16], 4);
  if ((cd == 0xffffffffu || entries == 0xffff) && at >= 20 && le(&end[at - 20], 4) == 0x07064b50u) {
    unsigned char z64[56];
    read_at(f, le(&end[at - 20 + 8], 8), z64, sizeof(z64), path, "zip64 directory");
    entries = le(z64 + 32, 8);
    cd = le(z64 + 48, 8);
  }
  const std::string want = name + ".npy";
  std::vector<std::string> names;
  uint64_t pos = cd;
  for (uint64_t e = 0; e < entries; ++e) {
    unsigned char h[46];
    read_at(f, pos, h, sizeof(h), path, "central directory");
    KDP_CHECK_FOR(KDP_ORIGIN_NAMED("NpyReader"), le(h, 4) == 0x02014b50u, IOError,
                  "'{}' is not a zip archive of arrays (.npz): a bad directory entry", path);
    const auto name_len = static_cast<size_t>(le(h + 28, 2));
    const auto extra_len = static_cast<size_t>(le(h + 30, 2));
    std::vector<unsigned char> rest(name_len + extra_len + le(h + 32, 2));
    read_at(f, pos + 46, rest.data(), rest.size(), path, "central directory");
    const std::string member(rest.begin(), rest.begin() + static_cast<long>(name_len));
    names.push_back(member.size() > 4 ? member.substr(0, member.size() - 4) : member);
    pos += 46 + rest.size();
    if (member != want) continue;
    Member m;
    m.method = static_cast<int>(le(h + 10, 2));
    m.compressed = le(h + 20, 4);
    uint64_t uncompressed = le(h + 24, 4), local = le(h + 42, 4);
    // The zip64 extra field holds, in order, the sizes and offset that are 0xffffffff.
    for (size_t x = name_len; x + 4 <= name_len + extra_len;) {
      const uint64_t id = le(&rest[x], 2), len = le(&rest[x + 2], 2);
      size_t v = x + 4;
      if (id == 1) {
        if (uncompressed == 0xffffffffu) uncompressed = le(&rest[v], 8), v += 8;
        if (m.compressed == 0xffffffffu) m.compressed = le(&rest[v], 8), v += 8;
        if (local == 0xffffffffu) local = le(&rest[v], 8);
      }
      x += 4 + static_cast<size_t>(len);
    }
    unsigned char lh[30];
    read_at(f, local, lh, sizeof(lh), path, "member header");
    m.data = local + 30 + le(lh + 26, 2) + le(lh + 28, 2);
    KDP_CHECK_FOR(KDP_ORIGIN_NAMED("NpyReader"), m.method == 0 || m.method == 8, IOError,
                  "'{}' member '{}' is compressed with zip method {}; kdp reads stored (np.savez) "
                  "and deflated (np.savez_compressed) members",
                  path, name, m.method);
    return m;
  }
  KDP_FAIL_FOR(KDP_ORIGIN_NAMED("NpyReader"), IOError, "'{}' has no array '{}' (it has: {})", path,
               name, fmt::join(names, ", "));
}

// The value of 'key' in a .npy header's dictionary text.
std::string header_value(const std::string& text, const std::string& key, const std::string& name) {
  const size_t k = text.find("'" + key + "'");
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("NpyReader"), k != std::string::npos, IOError,
                "'{}' is not a .npy array: its header has no '{}'", name, key);
  size_t v = text.find(':', k);
  v = text.find_first_not_of(' ', v + 1);
  const char open = text[v];
  if (open == '\'' || open == '"') return text.substr(v + 1, text.find(open, v + 1) - v - 1);
  if (open == '(') return text.substr(v + 1, text.find(')', v) - v - 1);
  return text.substr(v, text.find_first_of(",}", v) - v);
}

NpyHeader parse_header(NpyReader::Source& s, const std::string& name) {
  unsigned char magic[10];
  KDP_CHECK_FOR(
      KDP_ORIGIN_NAMED("NpyReader"),
      s.read(magic, sizeof(magic)) == sizeof(magic) && std::memcmp(magic, "\x93NUMPY", 6) == 0,
      IOError, "'{}' is not a .npy array (no \\x93NUMPY magic)", name);
  uint64_t len = le(magic + 8, 2);
  if (magic[6] >= 2) {  // versions 2 and 3: a 4-byte length
    unsigned char more[2];
    KDP_CHECK_FOR(KDP_ORIGIN_NAMED("NpyReader"), s.read(more, 2) == 2, IOError,
                  "'{}' ends inside its header", name);
    len = le(magic + 8, 2) | (le(more, 2) << 16);
  }
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("NpyReader"), len < (1u << 20), IOError,
                "'{}' claims a header of {} bytes", name, len);
  std::string text(static_cast<size_t>(len), '\0');
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("NpyReader"), s.read(text.data(), text.size()) == text.size(),
                IOError, "'{}' ends inside its header", name);
  NpyHeader h;
  const std::string descr = header_value(text, "descr", name);
  const bool known = descr.size() >= 3 && std::strchr("<>|=", descr[0]) != nullptr &&
                     std::strchr("uifb", descr[1]) != nullptr;
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("NpyReader"), known, IOError,
                "'{}' holds numpy type '{}'; kdp reads arrays of numbers (u, i, f, b)", name,
                descr);
  h.kind = descr[1];
  h.item_bytes = std::atoi(descr.c_str() + 2);
  h.big_endian = descr[0] == '>';
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("NpyReader"),
                h.item_bytes == 1 || h.item_bytes == 2 || h.item_bytes == 4 || h.item_bytes == 8,
                IOError, "'{}' holds numpy type '{}' of {} bytes", name, descr, h.item_bytes);
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("NpyReader"), header_value(text, "fortran_order", name) == "False",
                IOError,
                "'{}' is stored in Fortran order; save it with np.ascontiguousarray(array) "
                "first",
                name);
  const std::string shape = header_value(text, "shape", name);
  size_t at = 0;
  while ((at = shape.find_first_of("0123456789", at)) != std::string::npos) {
    size_t used = 0;
    h.shape.push_back(std::stoll(shape.substr(at), &used));
    at += used;
  }
  checked_numel(h.shape, static_cast<size_t>(h.item_bytes), fmt::format("'{}'", name));
  return h;
}

}  // namespace

NpyReader::NpyReader(const std::string& spec) : source_(std::make_unique<Source>()) {
  const size_t colon = spec.rfind(':');
  const bool member = colon != std::string::npos && spec.find(".npz", 0) != std::string::npos &&
                      colon > spec.find(".npz");
  const std::string path = member ? spec.substr(0, colon) : spec;
  name_ = member ? fmt::format("{}:{}", path, spec.substr(colon + 1)) : path;
  require_regular_file(path, "kdp::data", "array file ");
  Source& s = *source_;
  s.path = path;
  s.file = std::fopen(path.c_str(), "rb");
  KDP_CHECK(s.file != nullptr, IOError, "cannot open '{}': {}", path, describe_file_error(errno));
  if (member) {
    const Member m = find_member(s.file, path, spec.substr(colon + 1));
    KDP_CHECK(std::fseek(s.file, static_cast<long>(m.data), SEEK_SET) == 0, IOError,
              "cannot read '{}'", path);
    if (m.method == 8) {
      s.deflated = true;
      s.compressed_left = m.compressed;
      s.in.resize(1 << 20);
      KDP_CHECK(inflateInit2(&s.z, -MAX_WBITS) == Z_OK, IOError, "cannot inflate '{}'", name_);
    }
  } else {
    KDP_CHECK(spec.size() < 4 || spec.substr(spec.size() - 4) != ".npz", IOError,
              "'{}' is an .npz archive: name the array in it, as '{}:x'", path, path);
  }
  header_ = parse_header(s, name_);
}

NpyReader::~NpyReader() = default;

void NpyReader::read_rows(int64_t rows, void* out) {
  const uint64_t bytes = header_.row_bytes() * static_cast<uint64_t>(rows);
  KDP_CHECK(source_->read(out, static_cast<size_t>(bytes)) == bytes, IOError,
            "'{}' ends before its {} rows", name_, header_.rows());
}

}  // namespace kdp::data::detail
