// Argument checks shared by the ops: each failure names the op and the argument, and raises
// ValueError (TypeError for a dtype) before anything is enqueued.
#pragma once

#include <ATen/ATen.h>
#include <weft/weft.h>

#include "comm_state.hpp"

namespace weft::torch_ext {

// On Meta tensors (shape inference for torch.compile) every check but heap membership runs.
struct ArgCheck {
  const char* op;
  const CommState& comm;
  bool meta;

  void onDevice(const at::Tensor& t, const char* name) const {
    if (meta) {
      TORCH_CHECK_VALUE(t.is_meta(), op, ": ", name, ": is on ", t.device(),
                        ", but other arguments are on meta (shape inference takes meta tensors only)");
      return;
    }
    TORCH_CHECK_VALUE(t.device() == comm.device(), op, ": ", name, ": is on ", t.device(),
                      ", but the communicator's tensors are on ", comm.device());
  }
  void contiguous(const at::Tensor& t, const char* name) const {
    TORCH_CHECK_VALUE(t.is_contiguous(), op, ": ", name, ": must be contiguous (call .contiguous())");
  }
  void dims(const at::Tensor& t, const char* name, int64_t n) const {
    TORCH_CHECK_VALUE(t.dim() == n, op, ": ", name, ": must have ", n, " dimensions, got shape ", t.sizes());
  }
  // A device tensor of the given dtype, dense.
  void dense(const at::Tensor& t, const char* name, c10::ScalarType dtype) const {
    onDevice(t, name);
    TORCH_CHECK_TYPE(t.scalar_type() == dtype, op, ": ", name, ": must be ", dtype, ", got ", t.scalar_type());
    contiguous(t, name);
  }
  // float32, float16 or bfloat16 (or only the two 16-bit types), dense.
  weft_dtype_t floating(const at::Tensor& t, const char* name, bool halfOnly = false) const {
    onDevice(t, name);
    weft_dtype_t d;
    switch (t.scalar_type()) {
      case at::kFloat:
        TORCH_CHECK_TYPE(!halfOnly, op, ": ", name, ": must be bfloat16 or float16 (tensor cores), got float32");
        d = WEFT_FLOAT32;
        break;
      case at::kHalf:
        d = WEFT_FLOAT16;
        break;
      case at::kBFloat16:
        d = WEFT_BFLOAT16;
        break;
      default:
        TORCH_CHECK_TYPE(false, op, ": ", name, ": dtype ", t.scalar_type(), " is not one weft takes (",
                         halfOnly ? "bfloat16, float16" : "float32, float16, bfloat16", ")");
    }
    contiguous(t, name);
    return d;
  }
  void sameDtype(const at::Tensor& t, const char* name, const at::Tensor& ref, const char* refName) const {
    TORCH_CHECK_TYPE(t.scalar_type() == ref.scalar_type(), op, ": ", name, ": is ", t.scalar_type(), " but ", refName,
                     " is ", ref.scalar_type(), "; they must match");
  }
  // Peers write into `t`: it must lie in a symmetric block of this communicator.
  void symmetric(const at::Tensor& t, const char* name) const {
    if (meta || t.numel() == 0) return;
    TORCH_CHECK_VALUE(comm.inHeap(t.data_ptr(), t.nbytes()), op, ": ", name,
                      ": must be a symmetric tensor of this communicator (from comm.empty or comm.zeros), "
                      "since peers write into it");
  }
  void shape(const at::Tensor& t, const char* name, c10::IntArrayRef want) const {
    TORCH_CHECK_VALUE(t.sizes() == want, op, ": ", name, ": must have shape ", want, ", got ", t.sizes());
  }
};

}  // namespace weft::torch_ext
