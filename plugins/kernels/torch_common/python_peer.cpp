// The shared plan of the Python-run peers; see python_peer.hpp.
#include "python_peer.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>

namespace lca_torch {

PyObject* bytes_of(const void* data, size_t bytes) {
  return checked(PyBytes_FromStringAndSize(static_cast<const char*>(data), static_cast<Py_ssize_t>(bytes)),
                 "bytes");
}

bool PythonPlan::Bound::same(const lca_tensor& t) const {
  return data == t.data && shape == std::array<int64_t, 3>{t.shape[0], t.shape[1], t.shape[2]} &&
         stride == std::array<int64_t, 3>{t.stride[0], t.stride[1], t.stride[2]};
}

void PythonPlan::Bound::set(const lca_tensor& t) {
  data = t.data;
  shape = {t.shape[0], t.shape[1], t.shape[2]};
  stride = {t.stride[0], t.stride[1], t.stride[2]};
}

PeerModule import_peer_module(const lca_host_info& host, const std::string& who, const char* module,
                              std::initializer_list<const char*> files, const std::string& what,
                              const char* built_with) {
  PeerModule m;
  const char* env = std::getenv("LCA_TORCH_PYTHON");
  m.python = env && *env ? env : built_with;
  const std::filesystem::path dir = std::filesystem::path(host.plugin_dir ? host.plugin_dir : ".") / "python";
  for (const char* file : files)
    lca::require(std::filesystem::exists(dir / file), LCA_ERR_INVALID_ARGUMENT,
                 who + ": " + (dir / file).string() + " is missing; rebuild (it is copied beside the plugin) or reinstall");
  const auto t0 = std::chrono::steady_clock::now();
  start_python(m.python, dir.string());
  Gil gil;
  m.module = PyRef(checked(PyImport_ImportModule(module), what + " with " + m.python));
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

void PythonPlan::create(PyObject* module, const lca_exec& exec, bool warm_backward,
                        const std::function<void(const PutArg&)>& own) {
  Gil gil;
  PyRef kwargs(checked(PyDict_New(), "kwargs"));
  const PutArg put = [&](const char* key, PyObject* value) {
    PyRef v(checked(value, key));
    if (PyDict_SetItemString(kwargs.get(), key, v.get()) != 0) throw_python_error(key);
  };
  put("device", PyLong_FromLong(problem.device_index));
  put("stream", PyLong_FromUnsignedLongLong(reinterpret_cast<uintptr_t>(exec.stream)));
  put("head_dim", PyLong_FromLong(problem.head_dim));
  put("dtype", PyUnicode_FromString(lca::dtype_name(problem.dtype)));
  put("scale", PyFloat_FromDouble(problem.softmax_scale));
  put("warm_backward", PyBool_FromLong(warm_backward));
  own(put);
  PyRef cls(checked(PyObject_GetAttrString(module, "Plan"), who_ + ": the module's Plan"));
  PyRef args(checked(PyTuple_New(0), "args"));
  plan = PyRef(checked(PyObject_Call(cls.get(), args.get(), kwargs.get()), who_ + ": plan"));
}

PythonPlan::~PythonPlan() {
  if (!plan) return;
  Gil gil;
  plan = PyRef();
}

void PythonPlan::release(const lca_exec& /*exec*/) {
  if (!plan) return;
  Gil gil;
  PyRef r(PyObject_CallMethod(plan.get(), "close", nullptr));
  if (!r) PyErr_Clear();  // release() cannot fail; the objects go below all the same
  plan = PyRef();
}

std::string PythonPlan::info() const {
  if (!plan) return {};
  Gil gil;
  PyRef text(checked(PyObject_CallMethod(plan.get(), "info_json", nullptr), who_ + ": plan info"));
  const char* s = PyUnicode_AsUTF8(text.get());
  if (s == nullptr) throw_python_error(who_ + ": plan info");
  nlohmann::json j = nlohmann::json::parse(s);
  j["mask"] = mask_summary;
  j["mask_build_ms"] = mask_build_ms;
  j["plan_ms_in_plugin"] = plan_ms;
  return j.dump();
}

PyObject* PythonPlan::arg(Role role, const lca_tensor& t) {
  if (bound_[role].same(t)) Py_RETURN_NONE;
  const bool lse = role == kLse;
  const int32_t device = problem.device_index;
  PyObject* capsule = nullptr;
  if (layout_ == Layout::thd) {
    const int64_t shape[2] = {t.shape[0], t.shape[1]}, strides[2] = {t.stride[0], t.stride[1]};
    capsule = lse ? dlpack_capsule(t.data, LCA_DTYPE_F32, device, 2, shape, strides)
                  : dlpack_capsule(t.data, t.dtype, device, 3, t.shape, t.stride);
  } else if (lse) {  // {H, S, 1} -> [1, H, S]
    const int64_t heads = t.shape[0];
    const int64_t shape[3] = {1, heads, t.shape[1]};
    const int64_t strides[3] = {heads * t.stride[0], t.stride[0], t.stride[1]};
    capsule = dlpack_capsule(t.data, LCA_DTYPE_F32, device, 3, shape, strides);
  } else {  // THD {S, H, D} -> [1, H, S, D] with strides {S*H*D, D, H*D, 1}
    const int64_t shape[4] = {1, t.shape[1], t.shape[0], t.shape[2]};
    const int64_t strides[4] = {t.shape[0] * t.stride[0], t.stride[1], t.stride[0], t.stride[2]};
    capsule = dlpack_capsule(t.data, t.dtype, device, 4, shape, strides);
  }
  bound_[role].set(t);
  return capsule;
}

void PythonPlan::call(const char* method, const std::vector<std::pair<Role, const lca_tensor*>>& roles) {
  Gil gil;
  PyRef args(checked(PyTuple_New(static_cast<Py_ssize_t>(roles.size())), who_ + ": args"));
  try {
    for (size_t i = 0; i < roles.size(); ++i)  // PyTuple_SetItem takes the reference
      PyTuple_SetItem(args.get(), static_cast<Py_ssize_t>(i), arg(roles[i].first, *roles[i].second));
  } catch (...) {
    bound_ = {};
    throw;
  }
  PyRef fn(checked(PyObject_GetAttrString(plan.get(), method), who_ + ": " + method));
  PyRef r(PyObject_Call(fn.get(), args.get(), nullptr));
  if (!r) {
    bound_ = {};
    throw_python_error(who_ + ": " + method);
  }
}

void PythonPlan::forward(const lca_fwd_args& a) {
  call("forward", {{kQ, &a.q}, {kK, &a.k}, {kV, &a.v}, {kO, &a.o}, {kLse, &a.lse}});
}

void PythonPlan::backward(const lca_bwd_args& a) {
  call("backward", {{kQ, &a.q}, {kK, &a.k}, {kV, &a.v}, {kO, &a.o}, {kDo, &a.d_o}, {kLse, &a.lse}, {kDq, &a.dq},
                    {kDk, &a.dk}, {kDv, &a.dv}});
}

}  // namespace lca_torch
