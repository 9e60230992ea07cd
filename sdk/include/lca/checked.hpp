// Overflow-checked sizes: element and byte counts, mask areas and FLOP counts that grow with
// seqlen x heads x head_dim, for the host and for plugins alike.
// Rule: a count that grows with the sequence length goes through checked_product / checked_sum,
// never through a bare * or +: a wrapped size allocates too little and the first write crashes.
#pragma once

#include <lca/error.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace lca {

// The longest sequence the host and the SDK count: a mask's area (its unmasked cells) reaches
// seqlen^2, and areas are int64_t everywhere, so seqlen^2 must fit: floor(sqrt(2^63 - 1)).
inline constexpr int64_t max_seqlen = 3037000499;

// The allowed range in refusals of a length: "seqlen = N is out of range; allowed: " + this.
inline std::string seqlen_allowed() {
  return "1 <= seqlen <= " + std::to_string(max_seqlen) + " (a mask's area, up to seqlen^2, must fit in 64 bits)";
}

namespace detail {

template <class T>
std::optional<int64_t> as_count(T v) noexcept {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "counts are integers");
  if constexpr (std::is_signed_v<T>) {
    if (v < 0) return std::nullopt;
  } else {
    if (static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  }
  return static_cast<int64_t>(v);
}

inline std::optional<int64_t> mul(std::optional<int64_t> a, std::optional<int64_t> b) noexcept {
  if (!a || !b) return std::nullopt;
  if (*a != 0 && *b > std::numeric_limits<int64_t>::max() / *a) return std::nullopt;
  return *a * *b;
}

template <class T>
bool negative(T v) noexcept {
  if constexpr (std::is_signed_v<T>) return v < 0;
  return false;
}

template <class T>
void append_factor(std::string& out, T v) {
  if (!out.empty()) out += " x ";
  out += std::to_string(v);
}

}  // namespace detail

// The product of non-negative integer factors, or nothing when a factor is negative or the
// product does not fit in int64_t.
template <class... Ts>
std::optional<int64_t> product_of(Ts... factors) noexcept {
  std::optional<int64_t> p = int64_t{1};
  ((p = detail::mul(p, detail::as_count(factors))), ...);
  return p;
}

// The product of non-negative integer factors. A product that does not fit in 64 bits cannot be
// allocated, so it throws lca::Error(LCA_ERR_OUT_OF_MEMORY, ...) naming `what` and the factors
// ("Q bytes: 4611686018427387904 x 8 x 64 x 2 does not fit in 64 bits"); the host records such
// a cell as E. A negative factor throws LCA_ERR_INVALID_ARGUMENT.
template <class... Ts>
int64_t checked_product(std::string_view what, Ts... factors) {
  if (const auto p = product_of(factors...)) return *p;
  std::string text;
  (detail::append_factor(text, factors), ...);
  if ((... || detail::negative(factors)))
    throw Error(LCA_ERR_INVALID_ARGUMENT, std::string(what) + ": " + text + " has a negative factor");
  throw Error(LCA_ERR_OUT_OF_MEMORY, std::string(what) + ": " + text + " does not fit in 64 bits");
}

// Bytes of `elements` of `element_size` bytes each; as checked_product.
inline size_t checked_bytes(std::string_view what, int64_t elements, size_t element_size) {
  return static_cast<size_t>(checked_product(what, elements, element_size));
}

// a + b of non-negative counts; as checked_product.
inline int64_t checked_sum(std::string_view what, int64_t a, int64_t b) {
  if (a < 0 || b < 0)
    throw Error(LCA_ERR_INVALID_ARGUMENT,
                std::string(what) + ": " + std::to_string(a) + " + " + std::to_string(b) + " has a negative term");
  if (b > std::numeric_limits<int64_t>::max() - a)
    throw Error(LCA_ERR_OUT_OF_MEMORY,
                std::string(what) + ": " + std::to_string(a) + " + " + std::to_string(b) + " does not fit in 64 bits");
  return a + b;
}

}  // namespace lca
