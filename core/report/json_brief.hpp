// JSON values and texts from users' files as short one-line texts for messages ("found [1, [2,
// ...], ...]"), used by the refusals of manifests and matrix specs.
// Rule: never put a value from a user's file into a message with dump(): dump() recurses once a
// level, so a 200000-deep array overflows the stack, and prints megabytes of a large one.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace lca::core {

// Two levels deep and four items wide at most; strings and the whole cut near max_chars, at a
// character boundary.
std::string json_brief(const nlohmann::json& value, size_t max_chars = 80);

// Text from a file (a field name, a list item) for a one-line message: control characters as '?',
// cut near max_chars at a character boundary.
std::string text_brief(const std::string& text, size_t max_chars = 80);

}  // namespace lca::core
