#include "slice_index.hpp"

#include <algorithm>
#include <numeric>

namespace lca::cpu_reference {

AxisIndex::AxisIndex(int64_t length, const std::vector<int64_t>& begins,
                     const std::vector<int64_t>& ends, const std::vector<int64_t>& order_keys) {
  const size_t n = begins.size();
  starts_.push_back(0);
  for (size_t i = 0; i < n; ++i) {
    starts_.push_back(begins[i]);
    starts_.push_back(ends[i]);
  }
  std::sort(starts_.begin(), starts_.end());
  starts_.erase(std::unique(starts_.begin(), starts_.end()), starts_.end());
  while (!starts_.empty() && starts_.back() >= length) starts_.pop_back();
  if (starts_.empty()) starts_.push_back(0);
  starts_.push_back(length);

  // Sweep the segments in order with the slices sorted by their begin on this axis.
  std::vector<int32_t> by_begin(n);
  std::iota(by_begin.begin(), by_begin.end(), 0);
  std::stable_sort(by_begin.begin(), by_begin.end(),
                   [&](int32_t a, int32_t b) { return begins[a] < begins[b]; });
  std::vector<int32_t> active;
  size_t next = 0;
  offsets_.push_back(0);
  for (size_t seg = 0; seg + 1 < starts_.size(); ++seg) {
    const int64_t at = starts_[seg];
    std::erase_if(active, [&](int32_t id) { return ends[id] <= at; });
    while (next < n && begins[by_begin[next]] <= at) {
      if (ends[by_begin[next]] > at) active.push_back(by_begin[next]);
      ++next;
    }
    std::vector<int32_t> ordered = active;
    std::sort(ordered.begin(), ordered.end(), [&](int32_t a, int32_t b) {
      return order_keys[a] != order_keys[b] ? order_keys[a] < order_keys[b] : a < b;
    });
    ids_.insert(ids_.end(), ordered.begin(), ordered.end());
    offsets_.push_back(static_cast<int64_t>(ids_.size()));
  }
}

size_t AxisIndex::segment_of(int64_t p) const {
  auto it = std::upper_bound(starts_.begin(), starts_.end() - 1, p);
  return static_cast<size_t>(std::distance(starts_.begin(), it)) - 1;
}

namespace {

std::vector<lca_slice> non_empty_sorted(const lca_mask& mask) {
  std::vector<lca_slice> out;
  for (int64_t i = 0; i < mask.num_slices; ++i) {
    const lca_slice& s = mask.slices[i];
    if (s.q_end > s.q_begin && s.k_end > s.k_begin) out.push_back(s);
  }
  std::stable_sort(out.begin(), out.end(), [](const lca_slice& a, const lca_slice& b) {
    return a.q_begin < b.q_begin;
  });
  return out;
}

template <class F>
std::vector<int64_t> field(const std::vector<lca_slice>& slices, F get) {
  std::vector<int64_t> out;
  out.reserve(slices.size());
  for (const auto& s : slices) out.push_back(get(s));
  return out;
}

}  // namespace

SliceIndex::SliceIndex(const lca_mask& mask)
    : slices_(non_empty_sorted(mask)),
      rows_(mask.seqlen_q, field(slices_, [](auto& s) { return s.q_begin; }),
            field(slices_, [](auto& s) { return s.q_end; }),
            field(slices_, [](auto& s) { return s.k_begin; })),
      cols_(mask.seqlen_k, field(slices_, [](auto& s) { return s.k_begin; }),
            field(slices_, [](auto& s) { return s.k_end; }),
            field(slices_, [](auto& s) { return s.q_begin; })) {}

}  // namespace lca::cpu_reference
