#include "kdp/io/hdf5_listing.hpp"

#include <fmt/format.h>

#include "io/hdf5.hpp"

namespace kdp::io {

namespace {

void list_group(const h5::Group& g, const std::string& path, int indent, std::string& out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  for (const auto& [name, value] : g.attributes())
    out += fmt::format("{}  @{} = {}\n", pad, name, value);
  for (const std::string& name : g.members()) {
    const std::string child = path == "/" ? "/" + name : path + "/" + name;
    if (g.is_group(name)) {
      out += fmt::format("{}{}/ (group)\n", pad, child);
      list_group(g.open_group(name), child, indent + 2, out);
    } else {
      const h5::Dataset d = g.open_dataset(name);
      out += fmt::format("{}{}  {} [{}]\n", pad, child, h5::to_string(d.type()),
                         fmt::join(d.dims(), ", "));
      for (const auto& [aname, value] : d.attributes()) {
        out += fmt::format("{}    @{} = {}\n", pad, aname, value);
      }
    }
  }
}

}  // namespace

std::string hdf5_listing(const std::string& path) {
  const h5::File f = h5::File::open(path);
  std::string out = path + "\n";
  list_group(f, "/", 0, out);
  return out;
}

}  // namespace kdp::io
