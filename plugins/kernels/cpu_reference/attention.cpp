#include "attention.hpp"

#include <lca/checked.hpp>
#include <lca/error.hpp>
#include <lca/parallel.hpp>
#include <lca/types.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace lca::cpu_reference {
namespace {

constexpr int64_t kRowBlock = 16;  // rows (or keys) in one work item
constexpr int64_t kChunk = 64;     // keys scored before one online-softmax rescale

struct Bf16 { uint16_t bits; };
struct F16 { uint16_t bits; };

inline float widen(float x) { return x; }
inline double widen(double x) { return x; }
inline float widen(Bf16 x) { return bf16_to_f32(x.bits); }
inline float widen(F16 x) { return f16_to_f32(x.bits); }

template <class T> T narrow(double x);
template <> float narrow<float>(double x) { return static_cast<float>(x); }
template <> double narrow<double>(double x) { return x; }
template <> Bf16 narrow<Bf16>(double x) { return Bf16{f32_to_bf16(static_cast<float>(x))}; }
template <> F16 narrow<F16>(double x) { return F16{f32_to_f16(static_cast<float>(x))}; }

// A THD tensor: element (token, head, d) at data[token*s0 + head*s1 + d*s2].
template <class T>
struct Thd {
  T* data;
  int64_t s0, s1, s2;
  T* row(int64_t token, int64_t head) const { return data + token * s0 + head * s1; }
};

template <class T>
Thd<T> thd(const lca_tensor& t) {
  return {static_cast<T*>(t.data), t.stride[0], t.stride[1], t.stride[2]};
}

// LSE {heads, tokens, 1} in fp32.
struct Lse {
  float* data;
  int64_t s0, s1;
  float& at(int64_t head, int64_t token) const { return data[head * s0 + token * s1]; }
};

inline Lse lse_of(const lca_tensor& t) { return {static_cast<float*>(t.data), t.stride[0], t.stride[1]}; }

template <class T, class Acc>
void load(const T* p, int64_t stride, int64_t n, Acc* out) {
  for (int64_t d = 0; d < n; ++d) out[d] = static_cast<Acc>(widen(p[d * stride]));
}

// The row as Acc values: the tensor's own memory when it already is Acc and contiguous,
// otherwise converted into buf.
template <class T, class Acc>
const Acc* view(const T* p, int64_t stride, int64_t n, Acc* buf) {
  if constexpr (std::is_same_v<T, Acc>) {
    if (stride == 1) return p;
  }
  if (stride == 1) {
    for (int64_t d = 0; d < n; ++d) buf[d] = static_cast<Acc>(widen(p[d]));
  } else {
    load(p, stride, n, buf);
  }
  return buf;
}

template <class T, class Acc>
void store(T* p, int64_t stride, int64_t n, const Acc* in, Acc factor) {
  for (int64_t d = 0; d < n; ++d) p[d * stride] = narrow<T>(static_cast<double>(in[d] * factor));
}

// Eight independent partial sums: a fixed, deterministic order that the compiler can vectorise
// without reassociating.
template <class Acc>
Acc dot(const Acc* a, const Acc* b, int64_t n) {
  Acc part[8] = {};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (int l = 0; l < 8; ++l) part[l] += a[d + l] * b[d + l];
  for (int l = 0; d < n; ++d, ++l) part[l] += a[d] * b[d];
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

template <class Acc>
void axpy(Acc alpha, const Acc* x, Acc* y, int64_t n) {
  for (int64_t d = 0; d < n; ++d) y[d] += alpha * x[d];
}

// Per-thread scratch: `lanes` vectors of head_dim plus one chunk of scores.
template <class Acc>
struct Scratch {
  Acc* base;
  int64_t per_thread;
  Acc* lane(int thread, int index, int64_t head_dim) const {
    return base + thread * per_thread + index * head_dim;
  }
};

constexpr int kLanes = 6;

int64_t per_thread_elems(const Shape& s) {
  // Rounded up to 64 bytes so that threads do not share cache lines.
  return (kLanes * s.head_dim + kChunk + 7) / 8 * 8;
}

template <class Acc>
size_t scratch_bytes(const Shape& s, int threads) {
  return static_cast<size_t>(checked_product("cpu_reference scratch bytes (threads x elements x size)", threads,
                                             per_thread_elems(s), sizeof(Acc)));
}

template <class T, class Acc>
void forward_impl(const Shape& sh, const SliceIndex& index, const lca_fwd_args& a, int threads,
                  Acc* workspace) {
  const auto q = thd<const T>(a.q), k = thd<const T>(a.k), v = thd<const T>(a.v);
  const auto o = thd<T>(a.o);
  const Lse lse = lse_of(a.lse);
  const int64_t D = sh.head_dim, group = sh.heads_q / sh.heads_kv;
  const int64_t blocks = (sh.seqlen_q + kRowBlock - 1) / kRowBlock;
  const Acc scale = static_cast<Acc>(sh.softmax_scale);
  const Scratch<Acc> scratch{workspace, per_thread_elems(sh)};
  const auto& slices = index.slices();
  const AxisIndex& rows = index.rows();

  parallel_for(sh.heads_q * blocks, threads, [&](int64_t item, int thread) {
    const int64_t h = item / blocks, hk = h / group;
    const int64_t r0 = (item % blocks) * kRowBlock, r1 = std::min(sh.seqlen_q, r0 + kRowBlock);
    Acc* qb = scratch.lane(thread, 0, D);
    Acc* kb = scratch.lane(thread, 1, D);
    Acc* acc = scratch.lane(thread, 2, D);
    Acc* scores = scratch.lane(thread, kLanes, D);
    size_t seg = rows.segment_of(r0);
    for (int64_t r = r0; r < r1; ++r) {
      while (rows.segment_end(seg) <= r) ++seg;
      load(q.row(r, h), q.s2, D, qb);
      std::fill(acc, acc + D, Acc(0));
      Acc m = -std::numeric_limits<Acc>::infinity(), l = 0;
      for (int32_t id : rows.slices_of(seg)) {
        int64_t k0, k1;
        slice_row_range(slices[id], r, &k0, &k1);
        for (int64_t c0 = k0; c0 < k1; c0 += kChunk) {
          const int64_t c1 = std::min(k1, c0 + kChunk);
          Acc chunk_max = -std::numeric_limits<Acc>::infinity();
          for (int64_t key = c0; key < c1; ++key) {
            const Acc s = scale * dot(qb, view(k.row(key, hk), k.s2, D, kb), D);
            scores[key - c0] = s;
            chunk_max = std::max(chunk_max, s);
          }
          if (chunk_max > m) {
            const Acc correction = std::exp(m - chunk_max);
            l *= correction;
            for (int64_t d = 0; d < D; ++d) acc[d] *= correction;
            m = chunk_max;
          }
          for (int64_t key = c0; key < c1; ++key) {
            const Acc p = std::exp(scores[key - c0] - m);
            l += p;
            axpy(p, view(v.row(key, hk), v.s2, D, kb), acc, D);
          }
        }
      }
      if (l > 0) {
        store(o.row(r, h), o.s2, D, acc, Acc(1) / l);
        lse.at(h, r) = static_cast<float>(m + std::log(l));
      } else {
        store(o.row(r, h), o.s2, D, acc, Acc(0));
        lse.at(h, r) = -std::numeric_limits<float>::infinity();
      }
    }
  });
}

// log sum_k exp(scale * q.k) over the keys row r sees (-inf when it sees none).
template <class T, class Acc>
Acc row_logsumexp(const SliceIndex& index, int64_t r, const Acc* qb, const Thd<const T>& k,
                  int64_t hk, Acc scale, int64_t D, Acc* kb) {
  const AxisIndex& rows = index.rows();
  Acc m = -std::numeric_limits<Acc>::infinity(), l = 0;
  for (int32_t id : rows.slices_of(rows.segment_of(r))) {
    int64_t k0, k1;
    slice_row_range(index.slices()[id], r, &k0, &k1);
    for (int64_t key = k0; key < k1; ++key) {
      const Acc s = scale * dot(qb, view(k.row(key, hk), k.s2, D, kb), D);
      if (s > m) {
        l = l * std::exp(m - s) + 1;
        m = s;
      } else {
        l += std::exp(s - m);
      }
    }
  }
  return l > 0 ? m + std::log(l) : -std::numeric_limits<Acc>::infinity();
}

template <class T, class Acc>
void backward_impl(const Shape& sh, const SliceIndex& index, const lca_bwd_args& a, int threads,
                   Acc* workspace) {
  const auto q = thd<const T>(a.q), k = thd<const T>(a.k), v = thd<const T>(a.v);
  const auto o = thd<const T>(a.o), d_o = thd<const T>(a.d_o);
  const auto dq = thd<T>(a.dq), dk = thd<T>(a.dk), dv = thd<T>(a.dv);
  const Lse lse = lse_of(a.lse);
  const int64_t D = sh.head_dim, group = sh.heads_q / sh.heads_kv;
  const Acc scale = static_cast<Acc>(sh.softmax_scale);
  const Scratch<Acc> scratch{workspace, per_thread_elems(sh)};
  // Per (head, row): D_i = rowsum(dO_i * O_i), and the LSE that pass 2 uses, both {heads_q, Sq}.
  Acc* delta = workspace + threads * scratch.per_thread;
  Acc* row_lse = delta + sh.heads_q * sh.seqlen_q;
  const auto& slices = index.slices();
  // The LSE tensor is fp32: its rounding alone (~1e-7 relative in P) would cap the fp64 mode's
  // accuracy, so fp64 accumulation recomputes each row's LSE in fp64 (one more dot a key) and uses
  // it where it matches the given one.
  constexpr bool recompute_lse = std::is_same_v<Acc, double>;

  // Pass 1, by query rows: D_i and dQ_i = scale * sum_j P_ij (dP_ij - D_i) K_j.
  const AxisIndex& rows = index.rows();
  const int64_t row_blocks = (sh.seqlen_q + kRowBlock - 1) / kRowBlock;
  parallel_for(sh.heads_q * row_blocks, threads, [&](int64_t item, int thread) {
    const int64_t h = item / row_blocks, hk = h / group;
    const int64_t r0 = (item % row_blocks) * kRowBlock;
    const int64_t r1 = std::min(sh.seqlen_q, r0 + kRowBlock);
    Acc* qb = scratch.lane(thread, 0, D);
    Acc* dob = scratch.lane(thread, 1, D);
    Acc* kb = scratch.lane(thread, 2, D);
    Acc* vb = scratch.lane(thread, 3, D);
    Acc* dqb = scratch.lane(thread, 4, D);
    size_t seg = rows.segment_of(r0);
    for (int64_t r = r0; r < r1; ++r) {
      while (rows.segment_end(seg) <= r) ++seg;
      load(q.row(r, h), q.s2, D, qb);
      load(d_o.row(r, h), d_o.s2, D, dob);
      load(o.row(r, h), o.s2, D, vb);
      const Acc delta_r = dot(dob, vb, D);
      delta[h * sh.seqlen_q + r] = delta_r;
      Acc lse_r = static_cast<Acc>(lse.at(h, r));
      if constexpr (recompute_lse) {
        // The given LSE may be the whole row's while this call holds part of its keys (a CP
        // strategy's block): the local one replaces it only where they agree to the fp32 LSE's
        // rounding and the forward's (the call holds all but a negligible part of the row's mass).
        const Acc local = row_logsumexp(index, r, qb, k, hk, scale, D, kb);
        if (std::isfinite(local) && std::isfinite(lse_r) &&
            std::abs(local - lse_r) <= Acc(1e-6) * std::max(Acc(1), std::abs(lse_r)))
          lse_r = local;
      }
      row_lse[h * sh.seqlen_q + r] = lse_r;
      std::fill(dqb, dqb + D, Acc(0));
      for (int32_t id : rows.slices_of(seg)) {
        int64_t k0, k1;
        slice_row_range(slices[id], r, &k0, &k1);
        for (int64_t key = k0; key < k1; ++key) {
          const Acc* kr = view(k.row(key, hk), k.s2, D, kb);
          const Acc* vr = view(v.row(key, hk), v.s2, D, vb);
          const Acc p = std::exp(scale * dot(qb, kr, D) - lse_r);
          const Acc ds = p * (dot(dob, vr, D) - delta_r);
          axpy(ds, kr, dqb, D);
        }
      }
      store(dq.row(r, h), dq.s2, D, dqb, scale);
    }
  });

  // Pass 2, by key rows: dV_j = sum_i P_ij dO_i and dK_j = scale * sum_i dS_ij Q_i, summed over
  // the query heads of the kv head's group. Each key row belongs to one work item: no races.
  const AxisIndex& cols = index.cols();
  const int64_t key_blocks = (sh.seqlen_k + kRowBlock - 1) / kRowBlock;
  parallel_for(sh.heads_kv * key_blocks, threads, [&](int64_t item, int thread) {
    const int64_t hk = item / key_blocks;
    const int64_t c0 = (item % key_blocks) * kRowBlock;
    const int64_t c1 = std::min(sh.seqlen_k, c0 + kRowBlock);
    Acc* kb = scratch.lane(thread, 0, D);
    Acc* vb = scratch.lane(thread, 1, D);
    Acc* qb = scratch.lane(thread, 2, D);
    Acc* dob = scratch.lane(thread, 3, D);
    Acc* dkb = scratch.lane(thread, 4, D);
    Acc* dvb = scratch.lane(thread, 5, D);
    size_t seg = cols.segment_of(c0);
    for (int64_t key = c0; key < c1; ++key) {
      while (cols.segment_end(seg) <= key) ++seg;
      load(k.row(key, hk), k.s2, D, kb);
      load(v.row(key, hk), v.s2, D, vb);
      std::fill(dkb, dkb + D, Acc(0));
      std::fill(dvb, dvb + D, Acc(0));
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        for (int32_t id : cols.slices_of(seg)) {
          int64_t q0, q1;
          slice_col_range(slices[id], key, &q0, &q1);
          for (int64_t r = q0; r < q1; ++r) {
            const Acc* qr = view(q.row(r, h), q.s2, D, qb);
            const Acc* dor = view(d_o.row(r, h), d_o.s2, D, dob);
            const Acc p = std::exp(scale * dot(qr, kb, D) - row_lse[h * sh.seqlen_q + r]);
            axpy(p, dor, dvb, D);
            const Acc ds = p * (dot(dor, vb, D) - delta[h * sh.seqlen_q + r]);
            axpy(ds, qr, dkb, D);
          }
        }
      }
      store(dk.row(key, hk), dk.s2, D, dkb, scale);
      store(dv.row(key, hk), dv.s2, D, dvb, Acc(1));
    }
  });
}

// Calls f.template operator()<T, Acc>() for the problem's dtype and the accumulation.
template <class F>
void dispatch(int32_t dtype, Accumulate acc, F&& f) {
  auto with_acc = [&]<class T>() {
    if (acc == Accumulate::f64) f.template operator()<T, double>();
    else f.template operator()<T, float>();
  };
  switch (dtype) {
    case LCA_DTYPE_F32: with_acc.template operator()<float>(); break;
    case LCA_DTYPE_F64: with_acc.template operator()<double>(); break;
    case LCA_DTYPE_BF16: with_acc.template operator()<Bf16>(); break;
    case LCA_DTYPE_F16: with_acc.template operator()<F16>(); break;
    default: throw Error(LCA_ERR_UNSUPPORTED, "cpu_reference: unsupported dtype");
  }
}

}  // namespace

size_t forward_workspace_bytes(const Shape& shape, Accumulate acc, int threads) {
  return acc == Accumulate::f64 ? scratch_bytes<double>(shape, threads)
                                : scratch_bytes<float>(shape, threads);
}

size_t backward_workspace_bytes(const Shape& shape, Accumulate acc, int threads) {
  const size_t elem = acc == Accumulate::f64 ? sizeof(double) : sizeof(float);
  const int64_t rows = checked_product("cpu_reference delta and LSE bytes (2 x heads_q x seqlen_q x size)", 2,
                                       shape.heads_q, shape.seqlen_q, elem);
  return static_cast<size_t>(
      checked_sum("cpu_reference backward workspace bytes",
                  static_cast<int64_t>(forward_workspace_bytes(shape, acc, threads)), rows));
}

void attention_forward(const Shape& shape, const SliceIndex& index, const lca_fwd_args& args,
                       Accumulate acc, int threads, void* workspace) {
  dispatch(shape.dtype, acc, [&]<class T, class Acc>() {
    forward_impl<T, Acc>(shape, index, args, threads, static_cast<Acc*>(workspace));
  });
}

void attention_backward(const Shape& shape, const SliceIndex& index, const lca_bwd_args& args,
                        Accumulate acc, int threads, void* workspace) {
  dispatch(shape.dtype, acc, [&]<class T, class Acc>() {
    backward_impl<T, Acc>(shape, index, args, threads, static_cast<Acc*>(workspace));
  });
}

}  // namespace lca::cpu_reference
