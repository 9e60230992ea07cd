// The Ulysses all-to-all inside a head group: from (my tokens, all heads) to (the group's
// tokens, my share of heads) and back, for THD tensors and for LSE, on host or device buffers
// (through Device, on the exec stream). A group of one rank copies without a collective.
// Used by the engine.
// Rule: every member of the head group calls the same function in the same order (collective).
#pragma once

#include "buffers.hpp"
#include "device.hpp"
#include "layout.hpp"

#include <lca/cp_strategy.hpp>

#include <vector>

namespace lca::cp {

// The LSE tensor [heads, tokens] from head `head0` on.
inline View lse_view(const lca_tensor& lse, int64_t head0) {
  return View{advance(lse.data, LCA_DTYPE_F32, head0 * lse.stride[0]), LCA_DTYPE_F32, lse.stride[0], lse.stride[1], 1};
}

// Packed fp32 rows of `pitch` elements: [n0, n1] at data.
inline View rows_f32(const float* data, int64_t pitch) {
  return View{const_cast<float*>(data), LCA_DTYPE_F32, pitch, 1, 1};
}

struct HeadGroup {
  const Layout& L;
  const Comm& comm;
  const lca_allocator* alloc;
  const Device& dev;

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
    comm.all_to_all(send, sc.data(), sd.data(), recv, rc.data(), rd.data(), dtype, dev.stream());
  }

  // src [my rows, H, D] -> dst packed [group rows, h_l, D], same dtype.
  void scatter(const lca_tensor& src, const std::vector<int>& head_first, int h_l, void* dst) const {
    const int64_t dim = src.shape[2], n = my_rows(), per_row = h_l * dim;
    const int32_t dt = src.dtype;
    if (L.u == 1) {  // the group is this rank alone: a copy, no exchange
      dev.copy(view_of(src, 0, head_first[0]), packed(dst, dt, h_l, dim), n, h_l, dim);
      return;
    }
    Buffer send(alloc, static_cast<size_t>(L.u * n * per_row) * dtype_size(dt));
    std::vector<int64_t> sc(L.u), rc(L.u);
    for (int i = 0; i < L.u; ++i) {
      dev.copy(view_of(src, 0, head_first[i]), packed(advance(send.data(), dt, i * n * per_row), dt, h_l, dim), n,
               h_l, dim);
      sc[i] = n * per_row;
      rc[i] = rows(i) * per_row;
    }
    exchange(send.data(), sc, dst, rc, dt);
  }

  // src packed [group rows, h_l, D] of src_dtype -> dst [my rows, H, D]. With sum, members
  // that share a head (replicated KV heads) add up, in fp32.
  void gather(const void* src, int32_t src_dtype, const lca_tensor& dst, const std::vector<int>& head_first, int h_l,
              bool sum) const {
    const int64_t dim = dst.shape[2], heads = dst.shape[1], n = my_rows(), per_row = h_l * dim;
    if (L.u == 1) {
      dev.copy(packed(src, src_dtype, h_l, dim), view_of(dst, 0, head_first[0]), n, h_l, dim);
      return;
    }
    std::vector<int64_t> sc(L.u), rc(L.u);
    for (int i = 0; i < L.u; ++i) {
      sc[i] = rows(i) * per_row;
      rc[i] = n * per_row;
    }
    const bool shared = sum && heads < int64_t(h_l) * L.u;
    if (!shared) {
      // Every head has one owner: convert to the output dtype before the exchange (the same
      // values arrive, in fewer bytes).
      const int32_t dt = dst.dtype;
      Buffer converted;
      const void* send = src;
      if (src_dtype != dt) {
        converted = Buffer(alloc, static_cast<size_t>(group_rows() * per_row) * dtype_size(dt));
        dev.copy(packed(src, src_dtype, h_l, dim), packed(converted.data(), dt, h_l, dim), group_rows(), h_l, dim);
        send = converted.data();
      }
      Buffer recv(alloc, static_cast<size_t>(L.u * n * per_row) * dtype_size(dt));
      exchange(send, sc, recv.data(), rc, dt);
      for (int i = 0; i < L.u; ++i)
        dev.copy(packed(advance(recv.data(), dt, i * n * per_row), dt, h_l, dim), view_of(dst, 0, head_first[i]), n,
                 h_l, dim);
      return;
    }
    Buffer recv(alloc, static_cast<size_t>(L.u * n * per_row) * dtype_size(src_dtype));
    exchange(src, sc, recv.data(), rc, src_dtype);
    Buffer acc(alloc, static_cast<size_t>(n * heads * dim) * sizeof(float));
    dev.zero(acc.data(), acc.bytes());
    for (int i = 0; i < L.u; ++i)
      dev.copy(packed(advance(recv.data(), src_dtype, i * n * per_row), src_dtype, h_l, dim),
               packed(acc.as<float>() + head_first[i] * dim, LCA_DTYPE_F32, heads, dim), n, h_l, dim, /*add=*/true);
    dev.copy(packed(acc.data(), LCA_DTYPE_F32, heads, dim), view_of(dst), n, heads, dim);
  }

  // lse [H, my rows] (any strides) -> dst packed [h_l, group rows].
  void scatter_lse(const lca_tensor& lse, float* dst) const {
    const int64_t n = my_rows(), h_l = L.hq_l, g = group_rows();
    if (L.u == 1) {
      dev.copy(lse_view(lse, L.q_head_first[0]), rows_f32(dst, g), h_l, n, 1);
      return;
    }
    Buffer send(alloc, static_cast<size_t>(L.u * h_l * n) * sizeof(float));
    Buffer recv(alloc, static_cast<size_t>(h_l * g) * sizeof(float));
    std::vector<int64_t> sc(L.u), rc(L.u);
    for (int i = 0; i < L.u; ++i) {
      dev.copy(lse_view(lse, L.q_head_first[i]), rows_f32(send.as<float>() + i * h_l * n, n), h_l, n, 1);
      sc[i] = h_l * n;
      rc[i] = h_l * rows(i);
    }
    exchange(send.data(), sc, recv.data(), rc, LCA_DTYPE_F32);
    for (int i = 0; i < L.u; ++i)  // member i's block is [h_l, rows(i)]
      dev.copy(rows_f32(recv.as<float>() + offset(i) * h_l, rows(i)), rows_f32(dst + offset(i), g), h_l, rows(i), 1);
  }

  // src packed [h_l, group rows] -> lse [H, my rows].
  void gather_lse(const float* src, const lca_tensor& lse) const {
    const int64_t n = my_rows(), h_l = L.hq_l, g = group_rows();
    if (L.u == 1) {
      dev.copy(rows_f32(src, g), lse_view(lse, L.q_head_first[0]), h_l, n, 1);
      return;
    }
    Buffer send(alloc, static_cast<size_t>(h_l * g) * sizeof(float));
    Buffer recv(alloc, static_cast<size_t>(L.u * h_l * n) * sizeof(float));
    std::vector<int64_t> sc(L.u), rc(L.u);
    for (int i = 0; i < L.u; ++i) {
      dev.copy(rows_f32(src + offset(i), g), rows_f32(send.as<float>() + offset(i) * h_l, rows(i)), h_l, rows(i), 1);
      sc[i] = h_l * rows(i);
      rc[i] = h_l * n;
    }
    exchange(send.data(), sc, recv.data(), rc, LCA_DTYPE_F32);
    for (int i = 0; i < L.u; ++i)
      dev.copy(rows_f32(recv.as<float>() + i * h_l * n, n), lse_view(lse, L.q_head_first[i]), h_l, n, 1);
  }
};

}  // namespace lca::cp
