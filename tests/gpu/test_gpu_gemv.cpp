// GEMV + AllReduce on GPUs only (its cases on every backend are tests/ops/test_gemv.cpp): the op
// captured into a CUDA graph and replayed with fresh inputs, and the kernel's registers. Skipped
// (and reported so) without GPUs.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "device/gpu_host.hpp"
#include "gpu_support.hpp"
#include "ops/gemv_cases.hpp"

namespace weft::test {
namespace {

class GpuGemv : public OnEveryBackend {};

// As the path table runs it, and with the blas path forced (cuBLAS's GEMV and weft's AllReduce
// captured together).
TEST_P(GpuGemv, GraphCaptureAndReplay) {
  const uint64_t seed = freshSeed();
  std::string path;
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_GEMV_PATH", path.c_str(), 1);
    OpRank r = openRank(rank, n, id, 8 << 20);
    ASSERT_NE(r.comm, nullptr);
    // A row stream (batch 4) and the k-split one (batch 24).
    for (const GemvShape shape : {GemvShape{4, 1000, 300}, GemvShape{24, 1000, 600}}) {
      SCOPED_TRACE(::testing::Message() << path << " batch " << shape.batch);
      const GemvOnBackend in(rank, WEFT_BFLOAT16, shape, seed);
      const cudaGraphExec_t exec =
          captureGraph(streamOf(r), [&] { WEFT_ASSERT_OK(runGemv(r, in, WEFT_BFLOAT16, shape)); });
      ASSERT_NE(exec, nullptr);
      for (int replay = 0; replay < 3; ++replay) {
        const uint64_t s = seed + 2 * (replay + 1);
        in.fill(rank, s);
        poisonBytes(r.heap, shape.batch * shape.n * 2);
        WEFT_CUDA_OK(cudaGraphLaunch(exec, streamOf(r)));
        ASSERT_TRUE(finish(r));
        EXPECT_TRUE(receivedGemv(r, n, WEFT_BFLOAT16, shape, s)) << "replay " << replay;
      }
      WEFT_CUDA_OK(cudaGraphExecDestroy(exec));
    }
    closeRank(r);
  };
  for (const char* p : {"auto", "blas"}) {
    path = p;
    EXPECT_TRUE(runRanks(ranks(), body)) << path;
  }
}

WEFT_INSTANTIATE_ON_EVERY_BACKEND(GpuGemv);

// The GEMV kernel streams w at the memory's rate only while its state stays in registers: it sits
// at 255 of them, and what does not fit goes to its stack. A build on the GPU host itself (its
// own libstdc++, the same nvcc) once outlined the plain GEMV, and the kernel's stack grew from 376
// to 1064 bytes (1368 to 1904 through the proxy): a slower GEMV that no timing-free test saw. A
// change that moves these on purpose moves the bounds, with a GEMV benchmark beside it.
// Asked in a rank of its own: CUDA in the test process itself would fail every later test's
// forked ranks (a child cannot use a CUDA its parent initialised).
TEST(GpuGemvKernel, KeepsItsStateInRegisters) {
  WEFT_REQUIRE_GPUS(1);
  const RankBody body = [](int, int, const weft_unique_id_t&) {
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
  };
  EXPECT_TRUE(runRanks(1, body));
}

}  // namespace
}  // namespace weft::test
