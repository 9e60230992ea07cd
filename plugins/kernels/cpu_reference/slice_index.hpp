// SliceIndex: for a slice mask, which slices a query row (or a key column) falls in, so that
// the CPU reference visits only those slices instead of scanning all of them for every row.
// Built by CpuReference::plan(); read by the forward and backward loops.
// Rule: build it from a mask that has passed validate_mask(); it copies the slices it needs.
#pragma once

#include <lca/abi.h>

#include <cstdint>
#include <span>
#include <vector>

namespace lca::cpu_reference {

// One axis (query rows or key columns) cut into segments at every slice boundary; inside one
// segment the set of slices that cover the axis position does not change.
class AxisIndex {
 public:
  // begins/ends: the interval of each slice on this axis; order_keys: how to sort the slices
  // of one segment (the begin on the other axis, so keys or rows are visited in order).
  AxisIndex(int64_t length, const std::vector<int64_t>& begins, const std::vector<int64_t>& ends,
            const std::vector<int64_t>& order_keys);

  // The segment that contains position p (0 <= p < length).
  size_t segment_of(int64_t p) const;
  // First position of the segment after `segment` (length for the last one).
  int64_t segment_end(size_t segment) const { return starts_[segment + 1]; }
  std::span<const int32_t> slices_of(size_t segment) const {
    return {ids_.data() + offsets_[segment], ids_.data() + offsets_[segment + 1]};
  }

 private:
  std::vector<int64_t> starts_;   // segment starts, ascending, plus `length` as a sentinel
  std::vector<int64_t> offsets_;  // per segment, its range in ids_
  std::vector<int32_t> ids_;
};

class SliceIndex {
 public:
  explicit SliceIndex(const lca_mask& mask);

  const std::vector<lca_slice>& slices() const { return slices_; }
  const AxisIndex& rows() const { return rows_; }
  const AxisIndex& cols() const { return cols_; }

 private:
  std::vector<lca_slice> slices_;  // non-empty slices of the mask, sorted by q_begin
  AxisIndex rows_, cols_;
};

}  // namespace lca::cpu_reference
