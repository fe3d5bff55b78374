#include <dirent.h>

#include <cstring>

#include "gpu_support.hpp"

namespace weft::test {

int gpusPresent() {
  int n = 0;
  if (DIR* d = opendir("/dev")) {
    while (dirent* e = readdir(d)) {
      const char* name = e->d_name;
      if (strncmp(name, "nvidia", 6) == 0 && name[6] >= '0' && name[6] <= '9') ++n;
    }
    closedir(d);
  }
  return n;
}

void toDevice(void* dst, const std::vector<uint8_t>& src) {
  if (!src.empty()) WEFT_CUDA_OK(cudaMemcpy(dst, src.data(), src.size(), cudaMemcpyHostToDevice));
}

std::vector<uint8_t> toHost(const void* src, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  if (bytes) EXPECT_EQ(cudaMemcpy(out.data(), src, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

namespace {
__global__ void scaleKernel(float* out, const float* in, float f, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i] * f;
}
__global__ void fillKernel(float* out, float v, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = v;
}
}  // namespace

void launchScale(float* out, const float* in, float factor, size_t n, cudaStream_t s) {
  scaleKernel<<<128, 256, 0, s>>>(out, in, factor, n);
}
void launchFill(float* out, float value, size_t n, cudaStream_t s) { fillKernel<<<128, 256, 0, s>>>(out, value, n); }

}  // namespace weft::test
