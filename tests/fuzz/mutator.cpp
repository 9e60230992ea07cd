// The fuzzers' input generator; see mutator.hpp.
#include "mutator.hpp"

#include <algorithm>
#include <cstdio>

namespace lca::fuzz {
namespace {

// Numbers at the edges of int, int64, uint64, double and of the host's longest sequence.
const std::vector<std::string> kNumbers = {
    "0", "-0", "-1", "1", "2", "7", "63", "64", "65", "127", "128", "1023", "65536", "2147483647", "2147483648",
    "-2147483649", "4294967295", "4294967296", "4294967360", "3037000499", "3037000500", "1099511627776",
    "4611686018427387904", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
    "-9223372036854775809", "18446744073709551615", "18446744073709551616", "99999999999999999999999999",
    "1e308", "1e309", "-1e309", "1.5", "64.7", "0.0000001", "6.4e1", "1e3", "nan", "inf", "-inf", "0x10", "+5",
    " 5", "5 ", "1_000", "", "--1", "1-", "1e", "0.5e-400"};

// Values of every JSON type, and texts that are not JSON values at all.
const std::vector<std::string> kValues = {
    "null", "true", "false", "\"\"", "\"x\"", "\"64\"", "\"64:8\"", "\"*\"", "[]", "{}", "[1]", "[[]]", "[null]",
    "{\"a\":1}", "[\"causal\"]", "{\"cpu\":[64]}", "-", "\"", "\"\\", "\\", "'x'", "[,]", "{,}", "1,", "nul"};

// Byte sequences that are not UTF-8, and JSON escapes of code points that are not characters.
const std::vector<std::string> kBadText = {
    "\xff", "\xfe", "\xc3\x28", "\xa0\xa1", "\xe2\x28\xa1", "\xed\xa0\x80", "\xf0\x28\x8c\xbc", "\xc0\xaf",
    "\xf8\x88\x80\x80\x80", "\xc3", "\xe2\x82", std::string(1, '\0'), "\\ud800", "\\udfff", "\\u0000", "\\uD83D",
    "\\x41", "\r\n", "\t", "\x7f", "\xef\xbb\xbf"};

const std::vector<size_t> kDepths = {2, 8, 64, 1000, 20000, 200000};

bool is_number_char(char c) { return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'; }

}  // namespace

Mutator::Mutator(uint64_t seed, std::vector<std::string> seeds, std::vector<std::string> dictionary)
    : state_(seed), seeds_(std::move(seeds)), dictionary_(std::move(dictionary)) {
  if (seeds_.empty()) seeds_.push_back("");
  if (dictionary_.empty()) dictionary_.push_back("x");
}

uint64_t Mutator::below(uint64_t n) {
  // splitmix64: small, fast and the same everywhere.
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return n <= 1 ? 0 : z % n;
}

std::string_view Mutator::any_of(const std::vector<std::string>& list) { return list[below(list.size())]; }

std::string Mutator::next() {
  const uint64_t roll = below(100);
  if (roll < 2) {
    std::string random(below(64), '\0');
    for (char& c : random) c = static_cast<char>(below(256));
    return random;
  }
  std::string s(any_of(seeds_));
  if (roll < 5) return s;
  const uint64_t rounds = 1 + below(8);
  for (uint64_t i = 0; i < rounds; ++i) mutate_once(s);
  return s;
}

void Mutator::mutate_once(std::string& s) {
  const size_t n = s.size();
  const size_t at = below(n + 1);
  const size_t span = std::min<size_t>(n - at, 1 + below(16));
  switch (below(15)) {
    case 0:  // one bit
      if (n > 0) s[below(n)] ^= static_cast<char>(1u << below(8));
      break;
    case 1:  // one byte
      if (n > 0) s[below(n)] = static_cast<char>(below(256));
      break;
    case 2: {  // a few random bytes
      std::string bytes(1 + below(4), '\0');
      for (char& c : bytes) c = static_cast<char>(below(256));
      s.insert(at, bytes);
      break;
    }
    case 3:  // a range removed
      s.erase(at, span);
      break;
    case 4:  // cut short
      s.resize(at);
      break;
    case 5:  // a range doubled
      s.insert(at, s.substr(at, span));
      break;
    case 6: {  // a number replaced by one at an edge
      size_t b = at;
      while (b < n && !is_number_char(s[b])) ++b;
      if (b == n) {
        s.insert(at, any_of(kNumbers));
        break;
      }
      size_t e = b;
      while (e < n && is_number_char(s[e])) ++e;
      s.replace(b, e - b, any_of(kNumbers));
      break;
    }
    case 7:  // a number anywhere
      s.insert(at, any_of(kNumbers));
      break;
    case 8: {  // the value after a ':' '[' or ',' replaced by one of another type
      size_t b = s.find_first_of(":[,", at);
      if (b == std::string::npos) b = s.find_first_of(":[,");
      if (b == std::string::npos) {
        s.insert(at, any_of(kValues));
        break;
      }
      ++b;
      size_t e = b, depth = 0;
      bool in_string = false;
      for (; e < n; ++e) {
        const char c = s[e];
        if (in_string) {
          if (c == '\\') ++e;
          else if (c == '"') in_string = false;
          continue;
        }
        if (c == '"') in_string = true;
        else if (c == '[' || c == '{') ++depth;
        else if ((c == ']' || c == '}') && depth-- == 0) break;
        else if (c == ',' && depth == 0) break;
      }
      s.replace(b, std::min(e, n) - b, any_of(kValues));
      break;
    }
    case 9:  // bytes that are not UTF-8 (or escapes of non-characters)
      s.insert(at, any_of(kBadText));
      break;
    case 10: {  // deep nesting, around the whole text or at a point
      const size_t depth = kDepths[below(kDepths.size())];
      const bool object = below(2) == 0;
      std::string open, close;
      open.reserve(depth * 6);
      close.reserve(depth);
      for (size_t d = 0; d < depth; ++d) {
        open += object ? "{\"a\":" : "[";
        close += object ? "}" : "]";
      }
      if (below(2) == 0) {
        s = open + s + close;
      } else {
        s.insert(at, open + "1" + close);
      }
      break;
    }
    case 11:  // a known token, quoted or bare
      s.insert(at, below(2) ? "\"" + std::string(any_of(dictionary_)) + "\"" : std::string(any_of(dictionary_)));
      break;
    case 12: {  // a piece of another seed
      const std::string& other = seeds_[below(seeds_.size())];
      if (other.empty()) break;
      const size_t from = below(other.size());
      s.replace(at, span, other.substr(from, 1 + below(other.size() - from)));
      break;
    }
    case 13: {  // a field given twice, or one that does not exist
      const size_t brace = s.find('{', at) != std::string::npos ? s.find('{', at) : s.find('{');
      if (brace == std::string::npos) break;
      const std::string value(any_of(below(2) ? kValues : kNumbers));
      s.insert(brace + 1, "\"" + std::string(any_of(dictionary_)) + "\":" + value + ",");
      break;
    }
    default: {  // a quoted string's content replaced
      const size_t q = s.find('"', at);
      if (q == std::string::npos) break;
      const size_t end = s.find('"', q + 1);
      if (end == std::string::npos) break;
      s.replace(q + 1, end - q - 1, below(3) ? std::string(any_of(dictionary_)) : std::string(any_of(kBadText)));
      break;
    }
  }
  if (s.size() > (size_t{4} << 20)) s.resize(size_t{4} << 20);  // bounded memory per input
}

std::vector<std::string> quoted_strings(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = text.find('"'); i != std::string::npos;) {
    const size_t end = text.find('"', i + 1);
    if (end == std::string::npos) break;
    if (end - i - 1 <= 64) out.push_back(text.substr(i + 1, end - i - 1));
    i = text.find('"', end + 1);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string printable(std::string_view input, size_t max_chars) {
  std::string out;
  for (unsigned char c : input) {
    if (out.size() >= max_chars) {
      out += "...(" + std::to_string(input.size()) + " bytes)";
      break;
    }
    if (c >= 32 && c < 127 && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

}  // namespace lca::fuzz
