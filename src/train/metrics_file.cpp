#include "metrics_file.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/check.hpp"
#include "kdp/core/error.hpp"
#include "kdp/train/metrics_writer.hpp"

namespace kdp::train {

namespace {

// The step of a kdp row, or -1.
int64_t csv_step(const std::string& line) {
  // type,epoch,step,...
  const size_t a = line.find(',');
  const size_t b = a == std::string::npos ? a : line.find(',', a + 1);
  const size_t c = b == std::string::npos ? b : line.find(',', b + 1);
  if (c == std::string::npos) return -1;
  try {
    size_t used = 0;
    const double v = std::stod(line.substr(b + 1, c - b - 1), &used);
    return used == c - b - 1 && v >= 0 ? static_cast<int64_t>(v) : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

// The step of a JSON row, -1 when it has none; throws when it is not a kdp row.
int64_t json_step(const std::string& line, bool& is_row) {
  const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  is_row = row.is_object() && row.contains("type") && row["type"].is_string() &&
           (row["type"] == "step" || row["type"] == "epoch");
  if (!is_row || !row.contains("step") || !row["step"].is_number()) return -1;
  const double v = row["step"].get<double>();
  return v >= 0 ? static_cast<int64_t>(v) : -1;
}

// Reads one line of at most `limit` bytes into `line`: 1 when it ended with a
// newline, 0 at the end of the file (what was read is in `line`), -1 when the
// line is longer than `limit` (no kdp row is).
int read_line(std::istream& in, std::string& line, size_t limit) {
  line.clear();
  for (int ch = in.get(); ch != EOF; ch = in.get()) {
    if (ch == '\n') return 1;
    if (line.size() == limit) return -1;
    line.push_back(static_cast<char>(ch));
  }
  return 0;
}

std::string shorten(std::string text) {
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  for (char& ch : text) {
    if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) >= 0x7f) ch = '?';
  }
  return text;
}

}  // namespace

uint64_t MetricsFileContents::bytes_through_step(int64_t step) const {
  for (const Row& r : rows) {
    if (r.step > step) return r.offset;
  }
  return complete_end;
}

MetricsFileContents inspect_metrics_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KDP_CHECK(in, IOError, "cannot read the metrics file '{}': {}", path, describe_file_error(errno));
  MetricsFileContents c;
  const bool csv = MetricsWriter::is_csv(path);
  std::string line;
  uint64_t offset = 0;
  bool first = true;
  for (;;) {
    const int got = read_line(in, line, size_t{1} << 16);
    if (got < 0) {
      c.ours = false;
      c.why_not_ours =
          fmt::format("it starts with '{}' and lines longer than kdp writes", shorten(line));
      break;
    }
    if (got == 0) break;  // the end, or a row cut short: complete_end stays before it
    const uint64_t start = offset;
    offset += line.size() + 1;
    c.complete_end = offset;
    if (first && csv) {
      first = false;
      if (line != MetricsWriter::csv_header()) {
        c.ours = false;
        c.why_not_ours = fmt::format("its first line is '{}', not kdp's header '{}'", shorten(line),
                                     shorten(MetricsWriter::csv_header()));
        break;
      }
      c.body_start = offset;
      continue;
    }
    bool is_row = true;
    const int64_t step = csv ? csv_step(line) : json_step(line, is_row);
    if (first && !is_row) {
      c.ours = false;
      c.why_not_ours =
          fmt::format("its first line is '{}', not a JSON row of kdp's", shorten(line));
      break;
    }
    first = false;
    c.rows.push_back({step, start});
  }
  in.clear();
  in.seekg(0, std::ios::end);
  c.size = static_cast<uint64_t>(in.tellg());
  if (c.ours && c.size > 0 && c.complete_end == 0) {
    // Bytes but not one complete line: kdp writes whole lines.
    c.ours = false;
    c.why_not_ours = fmt::format("it holds '{}', not kdp's metrics rows", shorten(line));
  }
  return c;
}

}  // namespace kdp::train
