// Small value helpers shared by host and plugins: dtype sizes and names, fp16/bf16 <-> fp32 on
// the host, tensor views over THD buffers, slice predicates and each row's or column's range.
// Rule: the predicate in slice_contains() is THE definition of the slice types; keep it in
// sync with the comment in abi.h, and slice_row_range / slice_col_range in step with it.
#pragma once

#include <lca/abi.h>
#include <lca/checked.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace lca {

inline size_t dtype_size(int32_t dtype) {
  switch (dtype) {
    case LCA_DTYPE_F32: return 4;
    case LCA_DTYPE_F16: return 2;
    case LCA_DTYPE_BF16: return 2;
    case LCA_DTYPE_F64: return 8;
    default: return 0;
  }
}

inline const char* dtype_name(int32_t dtype) {
  switch (dtype) {
    case LCA_DTYPE_F32: return "f32";
    case LCA_DTYPE_F16: return "f16";
    case LCA_DTYPE_BF16: return "bf16";
    case LCA_DTYPE_F64: return "f64";
    default: return "unknown";
  }
}

// Returns -1 for an unknown name.
inline int32_t dtype_from_name(std::string_view name) {
  if (name == "f32" || name == "fp32" || name == "float32") return LCA_DTYPE_F32;
  if (name == "f16" || name == "fp16" || name == "float16") return LCA_DTYPE_F16;
  if (name == "bf16" || name == "bfloat16") return LCA_DTYPE_BF16;
  if (name == "f64" || name == "fp64" || name == "float64") return LCA_DTYPE_F64;
  return -1;
}

inline const char* slice_type_name(int32_t type) {
  switch (type) {
    case LCA_SLICE_FULL: return "FULL";
    case LCA_SLICE_CAUSAL: return "CAUSAL";
    case LCA_SLICE_INV_CAUSAL: return "INV_CAUSAL";
    case LCA_SLICE_BI_CAUSAL: return "BI_CAUSAL";
    default: return "UNKNOWN";
  }
}

// Round-to-nearest-even fp32 -> bf16, NaN kept quiet.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((u >> 23) & 0xffu) - 127 + 15;
  uint32_t mant = u & 0x7fffffu;
  if (((u >> 23) & 0xffu) == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  if (exp >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into exponent: fine
  return static_cast<uint16_t>(half);
}

// Reads element `index` of a buffer of `dtype` as double (host memory only).
inline double load_as_double(const void* data, int32_t dtype, int64_t index) {
  switch (dtype) {
    case LCA_DTYPE_F32: return static_cast<const float*>(data)[index];
    case LCA_DTYPE_F64: return static_cast<const double*>(data)[index];
    case LCA_DTYPE_BF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[index]);
    case LCA_DTYPE_F16: return f16_to_f32(static_cast<const uint16_t*>(data)[index]);
    default: return NAN;
  }
}

inline void store_from_double(void* data, int32_t dtype, int64_t index, double value) {
  switch (dtype) {
    case LCA_DTYPE_F32: static_cast<float*>(data)[index] = static_cast<float>(value); break;
    case LCA_DTYPE_F64: static_cast<double*>(data)[index] = value; break;
    case LCA_DTYPE_BF16:
      static_cast<uint16_t*>(data)[index] = f32_to_bf16(static_cast<float>(value));
      break;
    case LCA_DTYPE_F16:
      static_cast<uint16_t*>(data)[index] = f32_to_f16(static_cast<float>(value));
      break;
    default: break;
  }
}

// Does slice s (global coordinates) cover cell (q, k)?
inline bool slice_contains(const lca_slice& s, int64_t q, int64_t k) {
  if (q < s.q_begin || q >= s.q_end || k < s.k_begin || k >= s.k_end) return false;
  const int64_t i = q - s.q_begin;
  const int64_t j = k - s.k_begin;
  const int64_t shift = (s.k_end - s.k_begin) - (s.q_end - s.q_begin);
  switch (s.type) {
    case LCA_SLICE_FULL: return true;
    case LCA_SLICE_CAUSAL: return j <= i + shift;
    case LCA_SLICE_INV_CAUSAL: return j >= i;
    case LCA_SLICE_BI_CAUSAL: return j >= i && j <= i + shift;
    default: return false;
  }
}

// Keys [first, last) that query row q sees inside slice s; first >= last when none.
inline void slice_row_range(const lca_slice& s, int64_t q, int64_t* first, int64_t* last) {
  *first = s.k_begin;
  *last = s.k_begin;
  if (q < s.q_begin || q >= s.q_end) return;
  const int64_t i = q - s.q_begin;
  const int64_t shift = (s.k_end - s.k_begin) - (s.q_end - s.q_begin);
  int64_t lo = 0, hi = s.k_end - s.k_begin;  // local [lo, hi)
  if (s.type == LCA_SLICE_CAUSAL || s.type == LCA_SLICE_BI_CAUSAL) hi = std::min(hi, i + shift + 1);
  if (s.type == LCA_SLICE_INV_CAUSAL || s.type == LCA_SLICE_BI_CAUSAL) lo = std::max<int64_t>(lo, i);
  if (hi < lo) hi = lo;
  *first = s.k_begin + lo;
  *last = s.k_begin + std::max<int64_t>(hi, lo);
}

// Queries [first, last) that see key k inside slice s; first >= last when none. The column twin
// of slice_row_range: q in [first, last) exactly when slice_contains(s, q, k).
inline void slice_col_range(const lca_slice& s, int64_t k, int64_t* first, int64_t* last) {
  *first = s.q_begin;
  *last = s.q_begin;
  if (k < s.k_begin || k >= s.k_end) return;
  const int64_t j = k - s.k_begin;
  const int64_t shift = (s.k_end - s.k_begin) - (s.q_end - s.q_begin);
  int64_t lo = 0, hi = s.q_end - s.q_begin;  // local rows [lo, hi)
  // CAUSAL: j <= i + shift  <=>  i >= j - shift.   INV_CAUSAL: j >= i  <=>  i <= j.
  if (s.type == LCA_SLICE_CAUSAL || s.type == LCA_SLICE_BI_CAUSAL) lo = std::max(lo, j - shift);
  if (s.type == LCA_SLICE_INV_CAUSAL || s.type == LCA_SLICE_BI_CAUSAL) hi = std::min(hi, j + 1);
  if (hi < lo) hi = lo;
  *first = s.q_begin + lo;
  *last = s.q_begin + hi;
}

// Number of (q, k) cells slice s covers, in closed form: O(1) at any length. Throws
// lca::Error (checked.hpp) when lq x lk does not fit in 64 bits; every other term is smaller.
inline int64_t slice_area(const lca_slice& s) {
  const int64_t lq = s.q_end - s.q_begin;
  const int64_t lk = s.k_end - s.k_begin;
  if (lq <= 0 || lk <= 0) return 0;
  const auto fits = product_of(lq, lk);
  const int64_t full = fits ? *fits : checked_product(std::string("area of a ") + slice_type_name(s.type) + " slice", lq, lk);
  switch (s.type) {
    case LCA_SLICE_FULL: return full;
    // Row i sees min(lk, i + lk - lq + 1) keys (CAUSAL), or min(lk, lk - i) (INV_CAUSAL), when
    // positive: the full rectangle less a triangle of lq - 1 rows, or a triangle of lk rows.
    case LCA_SLICE_CAUSAL:
    case LCA_SLICE_INV_CAUSAL:
      return lq <= lk ? full - (lq % 2 == 0 ? (lq / 2) * (lq - 1) : lq * ((lq - 1) / 2))
                      : (lk % 2 == 0 ? (lk / 2) * (lk + 1) : lk * ((lk + 1) / 2));
    // Every row sees lk - lq + 1 keys, none when lk < lq.
    case LCA_SLICE_BI_CAUSAL: return lk >= lq ? lq * (lk - lq + 1) : 0;
    default: return 0;
  }
}

}  // namespace lca
