// cuBLAS for the baselines: a handle on the context's stream with a workspace of its own, so
// that cuBLAS allocates nothing while a graph is being captured.
#pragma once

#include <cublas_v2.h>

#include <string>

#include "common.cuh"

namespace weft::bench {

inline void cublasOk(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) die(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

class Blas {
 public:
  explicit Blas(cudaStream_t stream) {
    cublasOk(cublasCreate(&handle_), "cublasCreate");
    cublasOk(cublasSetStream(handle_, stream), "cublasSetStream");
    cuda(cudaMalloc(&workspace_, kWorkspace), "cuBLAS workspace");
    cublasOk(cublasSetWorkspace(handle_, workspace_, kWorkspace), "cublasSetWorkspace");
  }
  ~Blas() {
    cublasDestroy(handle_);
    cudaFree(workspace_);
  }
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  cublasHandle_t handle() const { return handle_; }

 private:
  static constexpr size_t kWorkspace = 32 << 20;
  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
};

}  // namespace weft::bench
