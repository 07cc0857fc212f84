#include <cctype>
#include <string>
#include <string_view>

#include "core/check.hpp"

namespace kdp::detail {

namespace {

enum class Match { whole, prefix };

// Removes every "<segment>::" of `name` whose segment is `drop` (or, with
// Match::prefix, begins with it).
void drop_segments(std::string& name, std::string_view drop, Match match = Match::whole) {
  for (size_t at = name.find(drop); at != std::string::npos; at = name.find(drop, at)) {
    const size_t end = name.find("::", at);
    const bool starts = at == 0 || name[at - 1] == ':';
    const bool whole = end == at + drop.size();
    if (starts && end != std::string::npos && (whole || match == Match::prefix)) {
      name.erase(at, end + 2 - at);
    } else {
      at += drop.size();
    }
  }
}

// The position of the '(' that opens the parameter list ending at `close`.
size_t opening_paren(std::string_view s, size_t close) {
  int depth = 0;
  for (size_t i = close + 1; i-- > 0;) {
    if (s[i] == ')') ++depth;
    if (s[i] == '(' && --depth == 0) return i;
  }
  return std::string_view::npos;
}

}  // namespace

std::string origin_of(const char* pretty_function) {
  std::string_view s = pretty_function;
  if (const size_t with = s.find(" [with "); with != std::string_view::npos) s = s.substr(0, with);
  // A lambda: the function it stands in ("f(args)::<lambda()>").
  if (const size_t lambda = s.find("::<lambda"); lambda != std::string_view::npos) {
    s = s.substr(0, lambda);
  }
  const size_t close = s.rfind(')');
  const size_t open = close == std::string_view::npos ? close : opening_paren(s, close);
  if (open == std::string_view::npos) return std::string(s);
  std::string_view head = s.substr(0, open);
  // The name is the last word before the parameters, template arguments and
  // Clang's "(anonymous namespace)" (which may hold spaces) included.
  int angle = 0, paren = 0;
  size_t start = 0;
  for (size_t i = head.size(); i-- > 0;) {
    if (head[i] == '>') ++angle;
    if (head[i] == '<') --angle;
    if (head[i] == ')') ++paren;
    if (head[i] == '(') --paren;
    if (head[i] == ' ' && angle == 0 && paren == 0) {
      start = i + 1;
      break;
    }
  }
  std::string name(head.substr(start));
  while (!name.empty() && (name.front() == '*' || name.front() == '&')) name.erase(0, 1);
  drop_segments(name, "{anonymous}");
  drop_segments(name, "(anonymous namespace)");
  // nvcc's front end names an anonymous namespace after its file and a hash.
  drop_segments(name, "_GLOBAL__N_", Match::prefix);
  drop_segments(name, "detail");
  drop_segments(name, "ops_detail");
  // A constructor "ns::X::X": the class.
  const size_t last = name.rfind("::");
  if (last != std::string::npos && last >= 2) {
    const std::string_view fn = std::string_view(name).substr(last + 2);
    const size_t before = name.rfind("::", last - 1);
    const size_t cls_start = before == std::string::npos ? 0 : before + 2;
    if (std::string_view(name).substr(cls_start, last - cls_start) == fn) name.resize(last);
  }
  return name;
}

std::string origin_namespace_of(const char* pretty_function) {
  const std::string name = origin_of(pretty_function);
  size_t end = 0;  // past the last namespace's "::"
  for (size_t at = name.find("::"); at != std::string::npos; at = name.find("::", end)) {
    if (!std::islower(static_cast<unsigned char>(name[end]))) break;
    end = at + 2;
  }
  return name.substr(0, end);
}

}  // namespace kdp::detail
