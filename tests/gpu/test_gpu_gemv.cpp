// GEMV + AllReduce on 1, 2 and 4 GPUs under both engines: every dtype, the decode shapes of the
// benchmark, odd shapes with tails, each path forced, and the op captured into a CUDA graph and
// replayed with fresh inputs. Skipped (and reported so) without GPUs.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "device/gpu_host.hpp"
#include "gpu_support.hpp"
#include "support/multirank.hpp"
#include "support/oracle.hpp"

namespace weft::test {
namespace {

struct Shape {
  int64_t batch, n, k;
};

// x and w of this rank for `seed` into the device (x at r.input, w after it); y poisoned.
void prepare(Rank& r, int rank, weft_dtype_t dt, Shape s, uint64_t seed, void** w) {
  const size_t es = dtypeBytes(dt);
  std::vector<uint8_t> x(s.batch * s.k * es), wh(s.n * s.k * es);
  fillInput(x.data(), dt, seed, rank, 0, s.batch * s.k);
  fillInput(wh.data(), dt, gemvWeightSeed(seed), rank, 0, s.n * s.k);
  *w = static_cast<uint8_t*>(r.input) + ((x.size() + 255) / 256 * 256);
  toDevice(r.input, x);
  toDevice(*w, wh);
  WEFT_CUDA_OK(cudaMemset(r.heap, 0xff, s.batch * s.n * es));
}

// One op on fresh inputs for `seed` (x, w and a poisoned y), checked against the float64 reference.
void runAndCheck(Rank& r, int rank, int nranks, weft_dtype_t dt, Shape s, uint64_t seed) {
  void* w = nullptr;
  prepare(r, rank, dt, s, seed, &w);
  WEFT_ASSERT_OK(weft_gemv_allreduce(r.comm, r.input, w, r.heap, s.batch, s.n, s.k, dt, r.stream));
  WEFT_CUDA_OK(cudaStreamSynchronize(r.stream));
  EXPECT_TRUE(
      checkGemvAllReduce(toHost(r.heap, s.batch * s.n * dtypeBytes(dt)).data(), dt, seed, nranks, s.batch, s.n, s.k));
}

// setUp with the GEMV path forced (gemv_path, read from the environment at init; each rank is a
// process of its own).
Rank setUpWithPath(int rank, int n, const weft_unique_id_t& id, size_t heapBytes, const std::string& path) {
  setenv("WEFT_GEMV_PATH", path.c_str(), 1);
  Rank r = setUp(rank, n, id, heapBytes);
  unsetenv("WEFT_GEMV_PATH");
  return r;
}

class GpuGemv : public GpusAndEngine {};

TEST_P(GpuGemv, EveryDtypeAndShape) {
  WEFT_REQUIRE_GPUS(gpus());
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    Rank r = setUp(rank, n, id, 80 << 20);
    ASSERT_NE(r.comm, nullptr);
    uint64_t s = seed;
    for (weft_dtype_t dt : {WEFT_FLOAT32, WEFT_FLOAT16, WEFT_BFLOAT16})
      // Tensor-core streams with tails in n and k (k a multiple of 8, not of a step): batch 2 and 6
      // read w in row runs (one and four rows per load); 9, 12, 24, 40 and 64 split k over the
      // warps (one, two and four batch tiles of 16, partly filled; k below one step and past the
      // last whole one).
      for (Shape shape :
           {Shape{1, 8192, 2048}, Shape{8, 8192, 512}, Shape{32, 8192, 256}, Shape{3, 301, 77}, Shape{2, 97, 1000},
            Shape{6, 75, 5000}, Shape{12, 1000, 1096}, Shape{9, 64, 136}, Shape{24, 200, 4104}, Shape{40, 97, 2056},
            Shape{64, 130, 24}, Shape{5, 0, 9}, Shape{2, 17, 0}}) {
        SCOPED_TRACE(::testing::Message() << dtypeName(dt) << " batch " << shape.batch << " n " << shape.n << " k "
                                          << shape.k << " seed " << s + 2);
        runAndCheck(r, rank, n, dt, shape, s += 2);
      }
    tearDown(r);
  };
  EXPECT_TRUE(runRanks(gpus(), body));
}

// Each path forced (gemv_path), on shapes where the owners' reduction applies (every rank owns a
// slice) and where it does not (64 x 130: 5 slices, so fused_rsag runs one-shot on more ranks), and
// empty ones. blas (cuBLAS's GEMV under the launched engine, weft's under the persistent one) in
// every dtype.
TEST_P(GpuGemv, EveryPathForced) {
  WEFT_REQUIRE_GPUS(gpus());
  const uint64_t seed = freshSeed();
  for (const std::string path : {"fused", "fused_rsag", "unfused", "blas"}) {
    const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
      Rank r = setUpWithPath(rank, n, id, 80 << 20, path);
      ASSERT_NE(r.comm, nullptr);
      uint64_t s = seed;
      std::vector<weft_dtype_t> dtypes = {WEFT_BFLOAT16};
      if (path == "blas") dtypes = {WEFT_FLOAT32, WEFT_FLOAT16, WEFT_BFLOAT16};
      for (weft_dtype_t dt : dtypes)
        for (Shape shape : {Shape{1, 8192, 2048}, Shape{32, 8192, 256}, Shape{17, 161, 40}, Shape{64, 130, 24},
                            Shape{5, 0, 9}, Shape{2, 17, 0}}) {
          SCOPED_TRACE(::testing::Message() << path << " " << dtypeName(dt) << " batch " << shape.batch << " n "
                                            << shape.n << " k " << shape.k << " seed " << s + 2);
          runAndCheck(r, rank, n, dt, shape, s += 2);
        }
      tearDown(r);
    };
    EXPECT_TRUE(runRanks(gpus(), body)) << path;
  }
}

// As the path table runs it, and with the blas path forced (cuBLAS's GEMV and weft's AllReduce
// captured together).
TEST_P(GpuGemv, GraphCaptureAndReplay) {
  WEFT_REQUIRE_GPUS(gpus());
  const uint64_t seed = freshSeed();
  std::string path;
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    Rank r = setUpWithPath(rank, n, id, 8 << 20, path);
    ASSERT_NE(r.comm, nullptr);
    // A row stream (batch 4) and the k-split one (batch 24).
    for (const Shape shape : {Shape{4, 1000, 300}, Shape{24, 1000, 600}}) {
      SCOPED_TRACE(::testing::Message() << path << " batch " << shape.batch);
      void* w = nullptr;
      prepare(r, rank, WEFT_BFLOAT16, shape, seed, &w);
      const cudaGraphExec_t exec = captureGraph(r.stream, [&] {
        WEFT_ASSERT_OK(
            weft_gemv_allreduce(r.comm, r.input, w, r.heap, shape.batch, shape.n, shape.k, WEFT_BFLOAT16, r.stream));
      });
      ASSERT_NE(exec, nullptr);
      for (int replay = 0; replay < 3; ++replay) {
        const uint64_t s = seed + 2 * (replay + 1);
        void* again = nullptr;
        prepare(r, rank, WEFT_BFLOAT16, shape, s, &again);
        WEFT_CUDA_OK(cudaGraphLaunch(exec, r.stream));
        WEFT_CUDA_OK(cudaStreamSynchronize(r.stream));
        EXPECT_TRUE(checkGemvAllReduce(toHost(r.heap, shape.batch * shape.n * 2).data(), WEFT_BFLOAT16, s, n,
                                       shape.batch, shape.n, shape.k))
            << "replay " << replay;
      }
      WEFT_CUDA_OK(cudaGraphExecDestroy(exec));
    }
    tearDown(r);
  };
  for (const char* p : {"auto", "blas"}) {
    path = p;
    EXPECT_TRUE(runRanks(gpus(), body)) << path;
  }
}

WEFT_INSTANTIATE_GPUS_AND_ENGINES(GpuGemv);

// The GEMV kernel streams w at the memory's rate only while its state stays in registers: it sits
// at 255 of them, and what does not fit goes to its stack. A build on the GPU host itself (its
// own libstdc++, the same nvcc) once outlined the plain GEMV, and the kernel's stack grew from 376
// to 1064 bytes (1368 to 1904 through the proxy): a slower GEMV that no timing-free test saw. A
// change that moves these on purpose moves the bounds, with a GEMV benchmark beside it.
TEST(GpuGemvKernel, KeepsItsStateInRegisters) {
  WEFT_REQUIRE_GPUS(1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  for (const bool proxied : {false, true}) {
    gpu::KernelResources k;
    const gpu::Outcome o = gpu::kernelResources(dev::OpKind::kGemvAllReduce, proxied, &k);
    ASSERT_TRUE(o) << o.message;
    std::printf("%s GEMV kernel: %d registers, %zu bytes of stack per thread\n", proxied ? "proxied" : "direct",
                k.registers, k.localBytes);
    EXPECT_LE(k.localBytes, proxied ? 1536u : 512u)
        << (proxied ? "proxied" : "direct") << " GEMV kernel: " << k.registers << " registers, " << k.localBytes
        << " bytes of stack per thread";
  }
}

}  // namespace
}  // namespace weft::test
