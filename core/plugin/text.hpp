// Text from outside the host (manifests, plugins' messages, file names) made safe to print and to
// record: results files are JSON, and JSON holds only valid UTF-8. Used by the registry, the
// runner's records and every writer of JSON.
// Rule: a string that may hold bytes from a plugin or a file goes through valid_utf8 (or is
// dumped with dump_json) before it reaches a record; never call nlohmann::json::dump on it bare.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace lca::core {

// `text` with every byte that is not part of a well-formed UTF-8 sequence replaced by U+FFFD.
std::string valid_utf8(std::string_view text);
bool is_valid_utf8(std::string_view text);
// The offset of the first byte that is not part of a well-formed sequence; npos when valid.
size_t first_invalid_utf8(std::string_view text);

// j.dump(indent) that replaces invalid UTF-8 instead of throwing (nlohmann's default throws a
// type_error that names neither the file nor the field).
std::string dump_json(const nlohmann::json& j, int indent = -1);

}  // namespace lca::core
