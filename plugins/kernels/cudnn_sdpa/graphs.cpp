#include "graphs.hpp"

#include "check.hpp"

#include <lca/abi.h>

#include <cudnn_frontend.h>

#include <sstream>
#include <unordered_map>
#include <vector>

namespace lca_cudnn_sdpa {
namespace fe = cudnn_frontend;
using Tensor = std::shared_ptr<fe::graph::Tensor_attributes>;

std::string GraphKey::str() const {
  std::ostringstream s;
  s << "dtype=" << dtype << " b=" << batch << " s=" << max_len << " t=" << total << " h=" << heads_q
    << ":" << heads_kv << " d=" << head_dim << " scale=" << scale << " band=" << left << "," << right
    << " ragged=" << ragged << " off64=" << offsets64;
  return s.str();
}

namespace {

// The BHSD view of a THD buffer with `heads` heads: token stride heads*d, head stride d.
std::vector<int64_t> dims(const GraphKey& k, int64_t heads) { return {k.batch, heads, k.max_len, k.head_dim}; }
std::vector<int64_t> strides(const GraphKey& k, int64_t heads) {
  return {k.max_len * heads * k.head_dim, k.head_dim, heads * k.head_dim, 1};
}

// LSE: non-ragged {heads, tokens} head-major, exactly the ABI layout; ragged {tokens, heads}
// token-major, the layout cuDNN's ragged stats take (the plugin transposes it).
std::vector<int64_t> stats_strides(const GraphKey& k) {
  if (k.ragged) return {k.max_len * k.heads_q, 1, k.heads_q, 1};
  return {k.heads_q * k.max_len, k.max_len, 1, 1};
}

struct Common {
  Tensor q, k, v, seq_q, seq_kv, off_q, off_kv, off_stats;
};

Tensor make(fe::graph::Graph& g, const char* name, Uid uid, std::vector<int64_t> dim,
            std::vector<int64_t> stride) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride));
}

Tensor make_index(fe::graph::Graph& g, const char* name, Uid uid, int64_t n, fe::DataType_t type) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({n, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_data_type(type));
}

std::shared_ptr<fe::graph::Graph> new_graph(const GraphKey& k) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(k.dtype == LCA_DTYPE_BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

Common inputs(fe::graph::Graph& g, const GraphKey& k) {
  Common c;
  c.q = make(g, "Q", kQ, dims(k, k.heads_q), strides(k, k.heads_q));
  c.k = make(g, "K", kK, dims(k, k.heads_kv), strides(k, k.heads_kv));
  c.v = make(g, "V", kV, dims(k, k.heads_kv), strides(k, k.heads_kv));
  if (k.ragged) {
    c.seq_q = make_index(g, "seq_len_q", kSeqLenQ, k.batch, fe::DataType_t::INT32);
    c.seq_kv = make_index(g, "seq_len_kv", kSeqLenKv, k.batch, fe::DataType_t::INT32);
    const auto off = k.offsets64 ? fe::DataType_t::INT64 : fe::DataType_t::INT32;
    c.off_q = make_index(g, "offset_q", kOffsetQ, k.batch + 1, off);
    c.off_kv = make_index(g, "offset_kv", kOffsetKv, k.batch + 1, off);
    c.off_stats = make_index(g, "offset_stats", kOffsetStats, k.batch + 1, off);
    c.q->set_ragged_offset(c.off_q);
    c.k->set_ragged_offset(c.off_kv);
    c.v->set_ragged_offset(c.off_kv);
  }
  return c;
}

// The band: cuDNN keeps (i, j) when j <= i + right_bound and j > i - left_bound (top-left
// diagonal; our documents are square, so top-left and bottom-right coincide).
template <class Attributes>
void set_mask(Attributes& a, const GraphKey& k, const Common& c) {
  if (k.right >= 0) {
    a.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT);
    a.set_diagonal_band_right_bound(static_cast<int>(k.right));
  }
  if (k.left >= 0) a.set_diagonal_band_left_bound(static_cast<int>(k.left + 1));
  if (k.ragged) {
    a.set_padding_mask(true).set_seq_len_q(c.seq_q).set_seq_len_kv(c.seq_kv);
    a.set_max_total_seq_len_q(k.total).set_max_total_seq_len_kv(k.total);
  }
}

#define LCA_FE_BUILD(call) LCA_FE_CHECK(call, LCA_ERR_UNSUPPORTED)

BuiltGraph finish(cudnnHandle_t handle, std::shared_ptr<fe::graph::Graph> g, int plan_index) {
  LCA_FE_BUILD(g->validate());
  LCA_FE_BUILD(g->build_operation_graph(handle));
  LCA_FE_BUILD(g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}));
  LCA_FE_BUILD(g->check_support(handle));
  if (plan_index < 0) LCA_FE_BUILD(g->build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE));
  else LCA_FE_BUILD(g->build_plan_at_index(handle, plan_index));
  BuiltGraph built;
  LCA_FE_BUILD(g->get_workspace_size(built.workspace));
  built.graph = std::move(g);
  return built;
}

}  // namespace

BuiltGraph build_forward(cudnnHandle_t handle, const GraphKey& k, int plan_index) {
  auto g = new_graph(k);
  const Common c = inputs(*g, k);
  auto attrs = fe::graph::SDPA_attributes().set_name("sdpa_fwd").set_generate_stats(true).set_attn_scale(k.scale);
  set_mask(attrs, k, c);
  auto [o, stats] = g->sdpa(c.q, c.k, c.v, attrs);
  o->set_output(true).set_uid(kO).set_dim(dims(k, k.heads_q)).set_stride(strides(k, k.heads_q));
  stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({k.batch, k.heads_q, k.max_len, 1})
      .set_stride(stats_strides(k));
  if (k.ragged) {
    o->set_ragged_offset(c.off_q);
    stats->set_ragged_offset(c.off_stats);
  }
  return finish(handle, std::move(g), plan_index);
}

BuiltGraph build_backward(cudnnHandle_t handle, const GraphKey& k, int plan_index) {
  auto g = new_graph(k);
  const Common c = inputs(*g, k);
  auto o = make(*g, "O", kO, dims(k, k.heads_q), strides(k, k.heads_q));
  auto d_o = make(*g, "dO", kdO, dims(k, k.heads_q), strides(k, k.heads_q));
  auto stats = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("Stats")
                             .set_uid(kStats)
                             .set_dim({k.batch, k.heads_q, k.max_len, 1})
                             .set_stride(stats_strides(k))
                             .set_data_type(fe::DataType_t::FLOAT));
  if (k.ragged) {
    o->set_ragged_offset(c.off_q);
    d_o->set_ragged_offset(c.off_q);
    stats->set_ragged_offset(c.off_stats);
  }
  auto attrs = fe::graph::SDPA_backward_attributes().set_name("sdpa_bwd").set_attn_scale(k.scale);
  set_mask(attrs, k, c);
  auto [dq, dk, dv] = g->sdpa_backward(c.q, c.k, c.v, o, d_o, stats, attrs);
  dq->set_output(true).set_uid(kdQ).set_dim(dims(k, k.heads_q)).set_stride(strides(k, k.heads_q));
  dk->set_output(true).set_uid(kdK).set_dim(dims(k, k.heads_kv)).set_stride(strides(k, k.heads_kv));
  dv->set_output(true).set_uid(kdV).set_dim(dims(k, k.heads_kv)).set_stride(strides(k, k.heads_kv));
  if (k.ragged) {
    dq->set_ragged_offset(c.off_q);
    dk->set_ragged_offset(c.off_kv);
    dv->set_ragged_offset(c.off_kv);
  }
  return finish(handle, std::move(g), plan_index);
}

std::string describe(const BuiltGraph& g) {
  std::string name = "?";
  if (!g.graph->get_plan_name(name).is_good()) name = "?";
  std::ostringstream s;
  s << "engine " << name << " (of " << g.graph->get_execution_plan_count() << " candidates), workspace "
    << g.workspace / (1 << 20) << " MiB";
  return s.str();
}

void execute(cudnnHandle_t handle, const BuiltGraph& g, const int64_t* uids, void* const* ptrs, int n,
             void* workspace) {
  std::unordered_map<int64_t, void*> pack;
  pack.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) pack.emplace(uids[i], ptrs[i]);
  LCA_FE_CHECK(g.graph->execute(handle, pack, workspace), LCA_ERR_DEVICE);
}

}  // namespace lca_cudnn_sdpa
