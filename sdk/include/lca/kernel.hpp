// IKernel: the C++ face of lca_kernel_vtable for plugin authors, and LCA_EXPORT_KERNEL, which
// adapts a class to the C vtable and exports lca_plugin_entry.
// Rule: a kernel class must be constructible from `const lca_host_info&`; it throws lca::Error
// for failures and never lets another exception type carry meaning.
#pragma once

#include <lca/abi.h>
#include <lca/error.hpp>

#include <memory>
#include <string>

namespace lca {

// Whatever plan() prepares: schedules, workspace, preprocessed masks. Destroyed by the plugin
// that made it, before the kernel that made it.
class IPlan {
 public:
  virtual ~IPlan() = default;
  // Called before destruction so that the plan can return workspace to exec.allocator.
  virtual void release(const lca_exec& /*exec*/) {}
  // Facts the host records with the cell (lca_kernel_vtable::plan_info): one JSON object as
  // text, or "" for none. Read after the timed calls, so it may report on them.
  virtual std::string info() const { return {}; }
};

class IKernel {
 public:
  virtual ~IKernel() = default;
  virtual std::unique_ptr<IPlan> plan(const lca_problem& problem, const lca_mask& mask,
                                      const lca_exec& exec) = 0;
  virtual void forward(IPlan& plan, const lca_fwd_args& args, const lca_exec& exec) = 0;
  virtual void backward(IPlan& /*plan*/, const lca_bwd_args& /*args*/, const lca_exec& /*exec*/) {
    throw Error(LCA_ERR_UNSUPPORTED, "this kernel has no backward pass");
  }
};

namespace detail {

template <class Kernel>
struct KernelAdapter {
  static lca_status create(const lca_host_info* host, lca_kernel** out) {
    return guard([&] {
      require(host != nullptr && out != nullptr, LCA_ERR_INVALID_ARGUMENT, "create: null argument");
      *out = reinterpret_cast<lca_kernel*>(static_cast<IKernel*>(new Kernel(*host)));
    });
  }
  static void destroy(lca_kernel* kernel) { delete reinterpret_cast<IKernel*>(kernel); }
  static lca_status plan(lca_kernel* kernel, const lca_problem* problem, const lca_mask* mask,
                         const lca_exec* exec, lca_plan** out) {
    return guard([&] {
      require(kernel && problem && mask && exec && out, LCA_ERR_INVALID_ARGUMENT, "plan: null argument");
      *out = nullptr;
      auto made = reinterpret_cast<IKernel*>(kernel)->plan(*problem, *mask, *exec);
      *out = reinterpret_cast<lca_plan*>(made.release());
    });
  }
  static void destroy_plan(lca_kernel*, lca_plan* plan, const lca_exec* exec) {
    auto* p = reinterpret_cast<IPlan*>(plan);
    if (p == nullptr) return;
    if (exec != nullptr) guard([&] { p->release(*exec); });
    delete p;
  }
  static lca_status forward(lca_kernel* kernel, lca_plan* plan, const lca_fwd_args* args,
                            const lca_exec* exec) {
    return guard([&] {
      require(kernel && plan && args && exec, LCA_ERR_INVALID_ARGUMENT, "forward: null argument");
      reinterpret_cast<IKernel*>(kernel)->forward(*reinterpret_cast<IPlan*>(plan), *args, *exec);
    });
  }
  static lca_status backward(lca_kernel* kernel, lca_plan* plan, const lca_bwd_args* args,
                             const lca_exec* exec) {
    return guard([&] {
      require(kernel && plan && args && exec, LCA_ERR_INVALID_ARGUMENT, "backward: null argument");
      reinterpret_cast<IKernel*>(kernel)->backward(*reinterpret_cast<IPlan*>(plan), *args, *exec);
    });
  }

  static const char* plan_info(lca_kernel* /*kernel*/, lca_plan* plan) {
    thread_local std::string text;
    auto* p = reinterpret_cast<IPlan*>(plan);
    if (p == nullptr) return nullptr;
    if (guard([&] { text = p->info(); }) != LCA_OK || text.empty()) return nullptr;
    return text.c_str();
  }

  static const lca_kernel_vtable* vtable(bool has_backward) {
    static const lca_kernel_vtable with_bwd{sizeof(lca_kernel_vtable), LCA_ABI_VERSION, &create,
                                            &destroy, &plan, &destroy_plan, &forward, &backward,
                                            &detail::last_error, &plan_info};
    static const lca_kernel_vtable without_bwd{sizeof(lca_kernel_vtable), LCA_ABI_VERSION, &create,
                                               &destroy, &plan, &destroy_plan, &forward, nullptr,
                                               &detail::last_error, &plan_info};
    return has_backward ? &with_bwd : &without_bwd;
  }
};

}  // namespace detail
}  // namespace lca

// In exactly one .cpp/.cu of the plugin:
//   LCA_EXPORT_KERNEL(MyKernel, "my_kernel", "0.1.0", /*has_backward=*/true)
#define LCA_EXPORT_KERNEL(KernelClass, NAME, VERSION, HAS_BACKWARD)                           \
  extern "C" LCA_ABI_EXPORT const lca_plugin_descriptor* lca_plugin_entry(void) {             \
    static const lca_plugin_descriptor descriptor{                                            \
        sizeof(lca_plugin_descriptor), LCA_ABI_VERSION, LCA_KIND_KERNEL, NAME, VERSION,       \
        ::lca::detail::KernelAdapter<KernelClass>::vtable(HAS_BACKWARD), nullptr, nullptr};   \
    return &descriptor;                                                                       \
  }
