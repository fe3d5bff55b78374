// weft::gpu::VendorBlas: cuBLAS on CUDA builds that found it; none otherwise (see blas_host.hpp).
// Its own library (weft_vendor_blas; vendor.hpp's helpers are inline): weft-bench's baselines link it too.
#include <climits>
#include <string>

#include "../blas_host.hpp"
#include "vendor.hpp"

#if defined(WEFT_BACKEND_CUDA) && defined(WEFT_HAVE_CUBLAS)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

namespace weft::gpu {

bool VendorBlas::fits(uint64_t batch, uint64_t n, uint64_t k) {
  return batch > 0 && n > 0 && k > 0 && batch <= INT_MAX && n <= INT_MAX && k <= INT_MAX;
}

#if defined(WEFT_BACKEND_CUDA) && defined(WEFT_HAVE_CUBLAS)

namespace {

// cuBLAS's recommended workspace on Hopper; with less it may pick a slower kernel than the baseline's.
constexpr size_t kWorkspaceBytes = 32u << 20;

Outcome checkBlas(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  Outcome o;
  o.fault = s == CUBLAS_STATUS_ALLOC_FAILED    ? Fault::kOutOfMemory
            : s == CUBLAS_STATUS_NOT_SUPPORTED ? Fault::kNotSupported
                                               : Fault::kOther;
  o.message = std::string(call) + ": " + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")";
  return o;
}

cublasHandle_t handleOf(void* h) { return static_cast<cublasHandle_t>(h); }

cudaDataType_t typeOf(dev::DType dt) {
  return dt == dev::DType::kFloat32 ? CUDA_R_32F : dt == dev::DType::kFloat16 ? CUDA_R_16F : CUDA_R_16BF;
}

}  // namespace

bool VendorBlas::built() { return true; }

Outcome VendorBlas::create(std::unique_ptr<VendorBlas>* out) {
  std::unique_ptr<VendorBlas> b(new VendorBlas());
  cublasHandle_t h = nullptr;
  Outcome o = checkBlas(cublasCreate(&h), "cublasCreate");
  if (!o) return o;
  b->handle_ = h;
  o = check(cudaMalloc(&b->workspace_, kWorkspaceBytes), "cudaMalloc (the cuBLAS workspace)");
  if (o) o = checkBlas(cublasSetWorkspace(h, b->workspace_, kWorkspaceBytes), "cublasSetWorkspace");
  if (o) *out = std::move(b);
  return o;  // on failure b's destructor frees what was made
}

VendorBlas::~VendorBlas() {
  if (handle_) cublasDestroy(handleOf(handle_));
  if (workspace_) cudaFree(workspace_);
}

Outcome VendorBlas::gemv(const void* x, const void* w, void* y, uint64_t batch, uint64_t n, uint64_t k, dev::DType dt,
                         void* stream) {
  const cudaDataType_t t = typeOf(dt);
  const int b = static_cast<int>(batch), rows = static_cast<int>(n), cols = static_cast<int>(k);
  const float one = 1.f, zero = 0.f;
  Outcome o = checkBlas(cublasSetStream(handleOf(handle_), static_cast<cudaStream_t>(stream)), "cublasSetStream");
  // Row-major y[batch, n] = x[batch, k] . w[n, k]^T is, column-major, Y (n x batch) = W^T X with W
  // k x n and X k x batch, both of leading dimension k. fp32 keeps full fp32 products (no TF32).
  if (o)
    o = checkBlas(cublasGemmEx(handleOf(handle_), CUBLAS_OP_T, CUBLAS_OP_N, rows, b, cols, &one, w, t, cols, x, t, cols,
                               &zero, y, t, rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "cublasGemmEx");
  return o;
}

Outcome VendorBlas::gemm(const void* a, const void* w, void* out, uint64_t tokens, uint64_t k, uint64_t h,
                         dev::DType dt, void* stream) {
  const cudaDataType_t t = typeOf(dt);
  const int m = static_cast<int>(tokens), depth = static_cast<int>(k), cols = static_cast<int>(h);
  const float one = 1.f, zero = 0.f;
  Outcome o = checkBlas(cublasSetStream(handleOf(handle_), static_cast<cudaStream_t>(stream)), "cublasSetStream");
  // Row-major out[tokens, h] = a[tokens, k] . w[k, h] is, column-major, OUT (h x tokens) = W A
  // with W h x k (leading dimension h) and A k x tokens (leading dimension k).
  if (o)
    o = checkBlas(cublasGemmEx(handleOf(handle_), CUBLAS_OP_N, CUBLAS_OP_N, cols, m, depth, &one, w, t, cols, a, t,
                               depth, &zero, out, t, cols, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "cublasGemmEx");
  return o;
}

#else  // no vendor BLAS in this build

namespace {
Outcome notBuilt() {
  Outcome o;
  o.fault = Fault::kNotSupported;
  o.message = "this build has no vendor BLAS (CUDA: cuBLAS was not found; HIP: Debian packages no hipBLAS or rocBLAS)";
  return o;
}
}  // namespace

bool VendorBlas::built() { return false; }
Outcome VendorBlas::create(std::unique_ptr<VendorBlas>*) { return notBuilt(); }
VendorBlas::~VendorBlas() = default;
Outcome VendorBlas::gemv(const void*, const void*, void*, uint64_t, uint64_t, uint64_t, dev::DType, void*) {
  return notBuilt();
}
Outcome VendorBlas::gemm(const void*, const void*, void*, uint64_t, uint64_t, uint64_t, dev::DType, void*) {
  return notBuilt();
}

#endif

}  // namespace weft::gpu
