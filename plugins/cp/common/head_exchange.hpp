// The Ulysses all-to-all inside a head group: from (my tokens, all heads) to (the group's
// tokens, my share of heads) and back, for THD tensors and for LSE. Used by the engine.
// Rule: every member of the head group calls the same function in the same order (collective).
#pragma once

#include "buffers.hpp"
#include "layout.hpp"

#include <lca/cp_strategy.hpp>

#include <vector>

namespace lca::cp {

struct HeadGroup {
  const Layout& L;
  const Comm& comm;
  const lca_allocator* alloc;
  void* stream;

  int64_t rows(int member) const { return L.rows_of(L.world_rank(L.ctx_idx, member)); }
  int64_t offset(int member) const {
    int64_t o = 0;
    for (int j = 0; j < member; ++j) o += rows(j);
    return o;
  }
  int64_t my_rows() const { return rows(L.head_idx); }
  int64_t group_rows() const { return L.group_rows[L.ctx_idx]; }

  // counts in elements per member; displacements are their prefix sums.
  void exchange(const void* send, const std::vector<int64_t>& sc, void* recv,
                const std::vector<int64_t>& rc, int32_t dtype) const {
    std::vector<int64_t> sd(sc.size(), 0), rd(rc.size(), 0);
    for (size_t i = 1; i < sc.size(); ++i) sd[i] = sd[i - 1] + sc[i - 1];
    for (size_t i = 1; i < rc.size(); ++i) rd[i] = rd[i - 1] + rc[i - 1];
    comm.all_to_all(send, sc.data(), sd.data(), recv, rc.data(), rd.data(), dtype, stream);
  }

  // src [my rows, H, D] -> dst packed [group rows, h_l, D], same dtype.
  void scatter(const lca_tensor& src, const std::vector<int>& head_first, int h_l, void* dst) const {
    const int64_t dim = src.shape[2], n = my_rows(), per_row = h_l * dim;
    const size_t esz = dtype_size(src.dtype);
    Buffer send(alloc, static_cast<size_t>(L.u * n * per_row) * esz);
    std::vector<int64_t> sc(L.u), rc(L.u);
    for (int i = 0; i < L.u; ++i) {
      pack_heads(src, 0, n, head_first[i], h_l, send.as<char>() + i * n * per_row * esz);
      sc[i] = n * per_row;
      rc[i] = rows(i) * per_row;
    }
    exchange(send.data(), sc, dst, rc, src.dtype);
  }

  // src packed [group rows, h_l, D] of src_dtype -> dst [my rows, H, D]. With sum, members
  // that share a head (replicated KV heads) add up, in fp32.
  void gather(const void* src, int32_t src_dtype, const lca_tensor& dst,
              const std::vector<int>& head_first, int h_l, bool sum) const {
    const int64_t dim = dst.shape[2], n = my_rows(), per_row = h_l * dim;
    const size_t esz = dtype_size(src_dtype);
    Buffer recv(alloc, static_cast<size_t>(L.u * n * per_row) * esz);
    std::vector<int64_t> sc(L.u), rc(L.u);
    for (int i = 0; i < L.u; ++i) {
      sc[i] = rows(i) * per_row;
      rc[i] = n * per_row;
    }
    exchange(src, sc, recv.data(), rc, src_dtype);
    if (!sum) {
      for (int i = 0; i < L.u; ++i)
        unpack_heads(recv.as<char>() + i * n * per_row * esz, src_dtype, dst, 0, n, head_first[i], h_l);
      return;
    }
    const int64_t heads = dst.shape[1];
    Buffer acc(alloc, static_cast<size_t>(n * heads * dim) * sizeof(float));
    acc.zero();
    float* a = acc.as<float>();
    for (int i = 0; i < L.u; ++i) {
      const char* block = recv.as<char>() + i * n * per_row * esz;
      for (int64_t r = 0; r < n; ++r)
        for (int64_t h = 0; h < h_l; ++h)
          add_into(a + (r * heads + head_first[i] + h) * dim, block + (r * per_row + h * dim) * esz,
                   src_dtype, dim);
    }
    unpack_heads(a, LCA_DTYPE_F32, dst, 0, n, 0, heads);
  }

  // lse [H, my rows] (any strides) -> dst packed [h_l, group rows].
  void scatter_lse(const lca_tensor& lse, float* dst) const {
    const int64_t n = my_rows(), h_l = L.hq_l, g = group_rows();
    Buffer send(alloc, static_cast<size_t>(L.u * h_l * n) * sizeof(float));
    Buffer recv(alloc, static_cast<size_t>(h_l * g) * sizeof(float));
    std::vector<int64_t> sc(L.u), rc(L.u);
    for (int i = 0; i < L.u; ++i) {
      float* out = send.as<float>() + i * h_l * n;
      for (int64_t h = 0; h < h_l; ++h)
        for (int64_t t = 0; t < n; ++t)
          out[h * n + t] = *reinterpret_cast<const float*>(at(lse, L.q_head_first[i] + h, t));
      sc[i] = h_l * n;
      rc[i] = h_l * rows(i);
    }
    exchange(send.data(), sc, recv.data(), rc, LCA_DTYPE_F32);
    for (int i = 0; i < L.u; ++i) {  // member i's block is [h_l, rows(i)]
      const float* in = recv.as<float>() + offset(i) * h_l;
      for (int64_t h = 0; h < h_l; ++h)
        for (int64_t t = 0; t < rows(i); ++t) dst[h * g + offset(i) + t] = in[h * rows(i) + t];
    }
  }

  // src packed [h_l, group rows] -> lse [H, my rows].
  void gather_lse(const float* src, const lca_tensor& lse) const {
    const int64_t n = my_rows(), h_l = L.hq_l, g = group_rows();
    Buffer send(alloc, static_cast<size_t>(h_l * g) * sizeof(float));
    Buffer recv(alloc, static_cast<size_t>(L.u * h_l * n) * sizeof(float));
    std::vector<int64_t> sc(L.u), rc(L.u);
    for (int i = 0; i < L.u; ++i) {
      float* out = send.as<float>() + offset(i) * h_l;
      for (int64_t h = 0; h < h_l; ++h)
        for (int64_t t = 0; t < rows(i); ++t) out[h * rows(i) + t] = src[h * g + offset(i) + t];
      sc[i] = h_l * rows(i);
      rc[i] = h_l * n;
    }
    exchange(send.data(), sc, recv.data(), rc, LCA_DTYPE_F32);
    for (int i = 0; i < L.u; ++i)
      for (int64_t h = 0; h < h_l; ++h)
        for (int64_t t = 0; t < n; ++t)
          *reinterpret_cast<float*>(at(lse, L.q_head_first[i] + h, t)) = recv.as<float>()[(i * h_l + h) * n + t];
  }
};

}  // namespace lca::cp
