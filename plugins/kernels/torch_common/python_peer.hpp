// The plan every Python-run peer shares (torch_flex, vsa_triton, fa4): it holds the module's
// Plan object, hands the host's buffers to its forward/backward as DLPack capsules (None where a
// role's buffer is the one passed last time, so the Python side reuses its tensor and does less
// inside the timed call), and reports the Plan's info_json with what the plugin measured.
// Rule: every member that touches Python takes the GIL itself; a failed call forgets the bound
// buffers, since the Python side may then hold fewer tensors than the plan thinks.
#pragma once

#include "python_runtime.hpp"

#include <lca/lca.hpp>

#include <array>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

namespace lca_torch {

PyObject* bytes_of(const void* data, size_t bytes);

template <class T>
PyObject* bytes_of(const std::vector<T>& v) {
  return bytes_of(v.data(), v.size() * sizeof(T));
}

// A peer's Python side, loaded at create(): the interpreter of LCA_TORCH_PYTHON, else `built_with`
// (the one the plugin was built against), started once; each of `files` must stand in the
// plugin's python/ folder (a missing one is refused by name); then `module` is imported, a
// failure naming `what` and the interpreter. Takes the GIL itself.
struct PeerModule {
  PyRef module;
  std::string python;  // the interpreter
  double seconds = 0;  // start and import
};
PeerModule import_peer_module(const lca_host_info& host, const std::string& who, const char* module,
                              std::initializer_list<const char*> files, const std::string& what,
                              const char* built_with);

// How a buffer is shown to Python: a [1, H, S, D] view of lca's THD {S, H, D} with LSE as
// [1, H, S] (the layout torch's attention functions take), or lca's own layout (THD {S, H, D},
// LSE {H, S}).
enum class Layout { bhsd, thd };

class PythonPlan : public lca::IPlan {
 public:
  PythonPlan(const lca_problem& p, Layout layout, std::string who)
      : problem(p), layout_(layout), who_(std::move(who)) {}
  ~PythonPlan() override;

  lca_problem problem{};
  PyRef plan;                   // the module's Plan
  std::string mask_summary;     // plan_info "mask"
  double mask_build_ms = 0;     // plan_info "mask_build_ms"
  double plan_ms = 0;           // plan_info "plan_ms_in_plugin"

  void release(const lca_exec& exec) override;  // Plan.close(), then drops it
  std::string info() const override;            // Plan.info_json() + the three above

  // Puts one keyword argument of the module's Plan(...): the value is a new reference (null: the
  // Python error, named by the key).
  using PutArg = std::function<void(const char* key, PyObject* value)>;
  // `plan` = the module's Plan(**kwargs), under the GIL: the arguments every peer takes (device,
  // stream, head_dim, dtype, scale, warm_backward) and the plugin's own, which `own` puts.
  void create(PyObject* module, const lca_exec& exec, bool warm_backward, const std::function<void(const PutArg&)>& own);

  // Plan.forward(q, k, v, o, lse) and Plan.backward(q, k, v, o, d_o, lse, dq, dk, dv).
  void forward(const lca_fwd_args& a);
  void backward(const lca_bwd_args& a);

 private:
  struct Bound {
    void* data = nullptr;
    std::array<int64_t, 3> shape{}, stride{};
    bool same(const lca_tensor& t) const;
    void set(const lca_tensor& t);
  };
  enum Role { kQ, kK, kV, kO, kLse, kDo, kDq, kDk, kDv, kRoles };

  PyObject* arg(Role role, const lca_tensor& t);
  void call(const char* method, const std::vector<std::pair<Role, const lca_tensor*>>& roles);

  Layout layout_;
  std::string who_;
  std::array<Bound, kRoles> bound_{};
};

}  // namespace lca_torch
