// DLPack capsules over lca's device buffers; see python_runtime.hpp. Apart from the interpreter
// code (python_runtime.cpp) because it alone needs torch's DLPack header.
#include "python_runtime.hpp"

#include <ATen/dlpack.h>
#include <lca/error.hpp>

namespace lca_torch {
namespace {

void capsule_destructor(PyObject* capsule) {
  // Only a capsule torch never consumed still carries its name "dltensor".
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

struct OwnedTensor {
  DLManagedTensor managed{};
  int64_t shape[4]{};
  int64_t strides[4]{};
};

void delete_owned(DLManagedTensor* self) { delete static_cast<OwnedTensor*>(self->manager_ctx); }

}  // namespace

PyObject* dlpack_capsule(void* data, int32_t dtype, int32_t device, int32_t ndim, const int64_t* shape,
                         const int64_t* strides) {
  lca::require(ndim >= 1 && ndim <= 4, LCA_ERR_INTERNAL, "dlpack_capsule: 1 to 4 dimensions");
  auto* owned = new OwnedTensor;
  DLTensor& t = owned->managed.dl_tensor;
  t.data = data;
  t.device = DLDevice{kDLCUDA, device};
  t.ndim = ndim;
  switch (dtype) {
    case LCA_DTYPE_BF16: t.dtype = DLDataType{static_cast<uint8_t>(kDLBfloat), 16, 1}; break;
    case LCA_DTYPE_F16: t.dtype = DLDataType{static_cast<uint8_t>(kDLFloat), 16, 1}; break;
    default: t.dtype = DLDataType{static_cast<uint8_t>(kDLFloat), 32, 1}; break;
  }
  for (int32_t i = 0; i < ndim; ++i) {
    owned->shape[i] = shape[i];
    owned->strides[i] = strides[i];
  }
  t.shape = owned->shape;
  t.strides = owned->strides;
  t.byte_offset = 0;
  owned->managed.manager_ctx = owned;
  owned->managed.deleter = &delete_owned;
  PyObject* capsule = PyCapsule_New(&owned->managed, "dltensor", &capsule_destructor);
  if (capsule == nullptr) {
    delete owned;
    throw_python_error("making a DLPack capsule");
  }
  return capsule;
}

}  // namespace lca_torch
