// Short texts of JSON values for messages; see json_brief.hpp.
#include "core/report/json_brief.hpp"

namespace lca::core {
namespace {

// Cuts text to at most max bytes without splitting a UTF-8 sequence, marking the cut.
std::string cut(std::string text, size_t max) {
  if (text.size() <= max) return text;
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  text.resize(end);
  return text + "...";
}

void append(std::string& out, const nlohmann::json& v, int depth, size_t max_chars) {
  if (out.size() > max_chars) return;
  if (!v.is_array() && !v.is_object()) {
    out += cut(v.dump(), max_chars);  // a scalar: dump() does not recurse
    return;
  }
  const bool array = v.is_array();
  if (depth >= 2 && !v.empty()) {
    out += array ? "[...]" : "{...}";
    return;
  }
  out += array ? "[" : "{";
  int items = 0;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (items > 0) out += ", ";
    if (++items > 4 || out.size() > max_chars) {
      out += "...";
      break;
    }
    if (!array) out += cut(nlohmann::json(it.key()).dump(), max_chars) + ": ";
    append(out, *it, depth + 1, max_chars);
  }
  out += array ? "]" : "}";
}

}  // namespace

std::string text_brief(const std::string& text, size_t max_chars) {
  std::string out = cut(text, max_chars);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return out;
}

std::string json_brief(const nlohmann::json& value, size_t max_chars) {
  std::string out;
  append(out, value, 0, max_chars);
  return cut(out, max_chars + 8);
}

}  // namespace lca::core
