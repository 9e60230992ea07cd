// A seeded input generator for the parser fuzzers: mutates valid seed texts the way careless
// users, bad disks and hostile files do (bit flips, truncation, huge numbers, wrong types,
// invalid UTF-8, deep nesting, pieces of other seeds).
// Used by test_fuzz.cpp; the same seed gives the same inputs on every run, so a failure replays.
// Rule: the generator never calls a parser; it only makes text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lca::fuzz {

class Mutator {
 public:
  // seeds: valid inputs to start from; dictionary: tokens worth inserting (field names, values).
  Mutator(uint64_t seed, std::vector<std::string> seeds, std::vector<std::string> dictionary);

  // One input: a seed, mutated 1 to 8 times (now and then a seed untouched, or a fully random text).
  std::string next();

  uint64_t below(uint64_t n);  // uniform enough in [0, n), n >= 1

 private:
  void mutate_once(std::string& s);
  std::string_view any_of(const std::vector<std::string>& list);

  uint64_t state_;
  std::vector<std::string> seeds_;
  std::vector<std::string> dictionary_;
};

// The quoted strings of a JSON text (field names and string values), for a dictionary.
std::vector<std::string> quoted_strings(const std::string& json_text);

// An input as printable text for a failure message: bytes outside ASCII 32..126 as \xNN,
// cut to max_chars.
std::string printable(std::string_view input, size_t max_chars = 600);

}  // namespace lca::fuzz
