#pragma once
// Arrays of numpy's .npy format, in a file of their own or as members of an
// .npz archive (np.savez, stored, or np.savez_compressed, deflated), read row
// by row from the start: what kdp-data import-npy streams into HDF5.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kdp::data::detail {

struct NpyHeader {
  char kind = 'f';  // numpy's kind: 'u', 'i', 'f', 'b' (others are refused at open)
  int item_bytes = 4;
  bool big_endian = false;
  std::vector<int64_t> shape;
  /// numpy's name of the type: "uint8", "float16", ...
  std::string dtype() const;
  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  /// Bytes of one row (one element for a 0-dimensional array).
  uint64_t row_bytes() const;
};

class NpyReader {
 public:
  /// "x.npy", or "arrays.npz:x" for the member x.npy of arrays.npz. Throws
  /// IOError naming the file for anything that is not such an array (a
  /// Fortran-ordered one included: numpy's C order is what rows need).
  explicit NpyReader(const std::string& spec);
  ~NpyReader();
  NpyReader(const NpyReader&) = delete;
  NpyReader& operator=(const NpyReader&) = delete;

  const NpyHeader& header() const { return header_; }
  const std::string& name() const { return name_; }
  /// The next `rows` rows' bytes, as stored, into `out`; a file that ends
  /// early is an IOError.
  void read_rows(int64_t rows, void* out);

  struct Source;

 private:
  std::string name_;
  std::unique_ptr<Source> source_;
  NpyHeader header_;
};

}  // namespace kdp::data::detail
