// GEMM + All-to-All on GPUs only (its cases on every backend are tests/ops/test_gemm.cpp): the op
// captured into a CUDA graph and replayed; a last wave split along k; bad input (a capacity too
// small, send_counts that do not add up) fails the op on every rank with nothing stored, on both
// paths; the blas path (cuBLAS's GEMM, the op routing its rows) beside the fused one, and its
// kernel's weight. Skipped (and reported so) without GPUs.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "device/gpu_host.hpp"
#include "device/ops/gemm/gemm_split_device.hpp"
#include "gpu_support.hpp"
#include "ops/gemm_cases.hpp"
#include "page_rows.hpp"
#include "runtime/status_read.hpp"

namespace weft::test {
namespace {

class GpuGemm : public OnEveryBackend {};

TEST_P(GpuGemm, GraphCaptureAndReplay) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    OpRank r = openRank(rank, n, id, 1 << 20);
    ASSERT_NE(r.comm, nullptr);
    const GemmCase c{seed, n, 200, 64, 136, WEFT_BFLOAT16, 2};
    const int64_t capacity = (1 << 20) / (c.h * 2);
    const GemmOnBackend in(gemmInputs(c, rank), n);
    const cudaGraphExec_t exec = captureGraph(streamOf(r), [&] { WEFT_ASSERT_OK(runGemm(r, c, rank, in, capacity)); });
    ASSERT_NE(exec, nullptr);
    for (int replay = 0; replay < 3; ++replay) {
      poisonBytes(r.heap, 1 << 20);
      WEFT_CUDA_OK(cudaGraphLaunch(exec, streamOf(r)));
      WEFT_CUDA_OK(cudaStreamSynchronize(streamOf(r)));
      EXPECT_TRUE(receivedGemm(r, c, rank, in, capacity)) << "replay " << replay;
    }
    WEFT_CUDA_OK(cudaGraphExecDestroy(exec));
    closeRank(r);
  };
  EXPECT_TRUE(runRanks(ranks(), body));
}

// Rank 0's tiles are half a grid (one column tile; k 7624: 120 slices, the last one 8 wide): on
// the sm_90a tile the wave is split along k (gemm_split_device.hpp), a tile in 2-3 parts whose
// owner adds 1-2 partials. The op runs three times (each op's partials are flagged with its epoch,
// over the last op's), then captured once and replayed twice.
TEST_P(GpuGemm, TheLastWaveSplitAlongKAddsUp) {
  const uint64_t seed = freshSeed();
  constexpr size_t kHeap = size_t{16} << 20;  // every rank's rows (8 columns) on up to 1000 SMs
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    OpRank r = openRank(rank, n, id, kHeap);  // first: it sets the engine up before CUDA starts
    ASSERT_NE(r.comm, nullptr);
    int device = 0, sms = 0;
    WEFT_CUDA_OK(cudaGetDevice(&device));
    WEFT_CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const int64_t rowTiles = sms / 2;
    const GemmCase c{seed, n, rowTiles * 128 - 37, 7624, 8, WEFT_BFLOAT16, 1};
    // The GEMM kernel runs a block per SM (its shared memory); where its tile is not the sm_90a
    // one, nothing is split and the op must still add up.
    EXPECT_TRUE(dev::planSplit(rowTiles, 120, sms).on()) << "rank 0's shape splits on " << sms << " SMs";
    const int64_t capacity = c.received(rank);
    ASSERT_LE(static_cast<size_t>(capacity * c.h * 2), kHeap);
    const GemmOnBackend in(gemmInputs(c, rank), n);
    auto check = [&](const char* what, int round) {
      WEFT_CUDA_OK(cudaStreamSynchronize(streamOf(r)));
      EXPECT_TRUE(receivedGemm(r, c, rank, in, capacity)) << what << " " << round << ", seed " << c.seed;
    };
    for (int round = 0; round < 3; ++round) {
      poisonBytes(r.heap, capacity * c.h * 2);
      WEFT_ASSERT_OK(runGemm(r, c, rank, in, capacity));
      check("eager op", round);
    }
    const cudaGraphExec_t exec = captureGraph(streamOf(r), [&] { WEFT_ASSERT_OK(runGemm(r, c, rank, in, capacity)); });
    ASSERT_NE(exec, nullptr);
    for (int replay = 0; replay < 2; ++replay) {
      poisonBytes(r.heap, capacity * c.h * 2);
      WEFT_CUDA_OK(cudaGraphLaunch(exec, streamOf(r)));
      check("replay", replay);
    }
    WEFT_CUDA_OK(cudaGraphExecDestroy(exec));
    closeRank(r);
  };
  EXPECT_TRUE(runRanks(ranks(), body));
}

// The second shape gives some blocks two data items (144 tiles on 132 SMs) and most tiles an
// expert's end (16 experts): a block that gives up after a tile's first part leaves the slices
// loaded ahead for the second unused (the sm_90a ring drops them before its next item).
// The last rank's input is wrong (a capacity one row short, or send_counts that do not sum to its
// tokens): the op fails on every rank, and no recv and no recv_counts is written, on the fused path
// and on the blas path (on one rank, a checked copy of its own: gemm_solo_device.hpp; grouped
// experts run fused whatever the path).
enum class GemmFault { kCapacity, kSendCounts };
// The GEMM ops this process's page of `rank` (in status directory `dir`) shows; `flagged`: those
// that routed the vendor BLAS's product (the blas path).
PageRows gemmRowsOnPage(const std::string& dir, int rank) {
  return rowsOnPage(dir, rank, dev::OpKind::kGemmAllToAll, status::kRowVendorProduct);
}

TEST_P(GpuGemm, BadInputFailsEveryRankAndStoresNothing) {
  const uint64_t seed = freshSeed();
  constexpr GemmShape kFailing[] = {{300, 32, 128, 1}, {2200, 32, 2048, 16}};
  constexpr size_t kHeap = size_t{4} * 2200 * 2048 * 2;  // every rank's rows, at most
  char tmpl[] = "/tmp/weft-gpu-gemm-XXXXXX";
  const std::string dir = std::string(mkdtemp(tmpl)) + "/pages";
  for (const char* path : {"fused", "blas"})
    for (const GemmFault fault : {GemmFault::kCapacity, GemmFault::kSendCounts})
      for (const GemmShape& sh : kFailing) {  // a communicator each: a failed op fails its communicator
        const bool capacityFault = fault == GemmFault::kCapacity;
        SCOPED_TRACE(::testing::Message() << "gemm_path " << path << (capacityFault ? ", capacity" : ", send_counts")
                                          << ", tokens " << sh.tokens << " h " << sh.h << " experts " << sh.experts);
        const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
          setenv("WEFT_GEMM_PATH", path, 1);
          setenv("WEFT_STATUS_DIR", dir.c_str(), 1);
          OpRank r = openRank(rank, n, id, kHeap);
          unsetenv("WEFT_GEMM_PATH");
          ASSERT_NE(r.comm, nullptr);
          GemmCase c{seed, n, sh.tokens, sh.k, sh.h, WEFT_BFLOAT16, sh.experts};
          while (c.received(n - 1) == 0) ++c.seed;
          GemmInputs host = gemmInputs(c, rank);
          const bool culprit = rank == n - 1;
          if (culprit && !capacityFault) host.sendCounts[0] += 1;
          const GemmOnBackend in(host, n);
          poisonBytes(r.heap, kHeap);
          // The extra row goes to rank 0: room for it, so that the verdict is the counts' (a
          // capacity fault of a lower rank would come first).
          const int64_t capacity = !capacityFault ? c.received(rank) + 1
                                   : culprit      ? c.received(rank) - 1
                                                  : c.received(rank);
          WEFT_ASSERT_OK(runGemm(r, c, rank, in, capacity));
          EXPECT_EQ(cudaStreamSynchronize(streamOf(r)), cudaSuccess) << "the stream drains";
          weft_result_t async = WEFT_SUCCESS;
          WEFT_ASSERT_OK(weft_comm_get_async_error(r.comm, &async));
          EXPECT_EQ(async, WEFT_ERR_INVALID_ARGUMENT);
          const std::string why = weft_get_last_error(nullptr);
          EXPECT_NE(why.find(capacityFault ? "more than its recv_capacity" : "send_counts are negative or do not sum"),
                    std::string::npos)
              << why;
          EXPECT_NE(why.find("rank " + std::to_string(n - 1)), std::string::npos) << why;
          const std::vector<uint8_t> out = download(r.heap, kHeap);
          for (size_t i = 0; i < out.size(); ++i)
            if (out[i] != 0xff) {
              ADD_FAILURE() << "byte " << i << " of recv was written (seed " << c.seed << ")";
              break;
            }
          const std::vector<uint8_t> counts = download(in.recvCounts, n * sizeof(int64_t));
          for (int j = 0; j < n; ++j)
            EXPECT_EQ(reinterpret_cast<const int64_t*>(counts.data())[j], -7) << "recv_counts[" << j << "] written";
          // The path the case names is the one that refused the input: blas where the launched
          // engine runs it (the persistent engine has no vendor BLAS, and a grouped call is always
          // fused: its experts' rows are out of the vendor BLAS's reach), else fused.
          const PageRows ops = gemmRowsOnPage(dir, rank);
          const bool vendor = std::string(path) == "blas" && gEngine == "launched" && sh.experts == 1;
          EXPECT_EQ(ops.all, 1) << "GEMM ops on this rank's page in " << dir;
          EXPECT_EQ(ops.flagged, vendor ? 1 : 0) << "GEMM ops that routed the vendor BLAS's product";
          closeFailedRank(r);
        };
        EXPECT_TRUE(runRanks(ranks(), body));
      }
}

// gemm_path blas on the even ranks, fused on the odd ones (one op, two paths): every shape of the
// suite eagerly, then a larger one whose first op is inside a captured graph (rank 0's product,
// over 2 MiB, outgrows the buffer during the capture), replayed twice. The launched engine runs cuBLAS's GEMM, as this
// rank's status page says; the persistent engine has no vendor BLAS and runs every op fused.
TEST_P(GpuGemm, TheBlasPathRoutesCublasProductsAndRanksMayDiffer) {
  const uint64_t seed = freshSeed();
  char tmpl[] = "/tmp/weft-gpu-gemm-XXXXXX";
  const std::string dir = std::string(mkdtemp(tmpl)) + "/pages";
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    const bool blas = rank % 2 == 0;
    setenv("WEFT_GEMM_PATH", blas ? "blas" : "fused", 1);
    setenv("WEFT_STATUS_DIR", dir.c_str(), 1);
    constexpr size_t kHeap = size_t{16} << 20;  // the large case's rows from 4 ranks
    OpRank r = openRank(rank, n, id, kHeap);
    ASSERT_NE(r.comm, nullptr);
    uint64_t s = seed;
    for (weft_dtype_t dt : {WEFT_BFLOAT16, WEFT_FLOAT16})
      for (const GemmShape& sh : gemmShapes())
        gemmCase(r, GemmCase{++s, n, sh.tokens, sh.k, sh.h, dt, sh.experts}, rank, kGemmCapacity);
    const GemmCase big{++s, n, 2100, 264, kGemmMaxH, WEFT_BFLOAT16, 1};
    const int64_t capacity = kHeap / (kGemmMaxH * 2);
    const GemmOnBackend in(gemmInputs(big, rank), n);
    const cudaGraphExec_t exec =
        captureGraph(streamOf(r), [&] { WEFT_ASSERT_OK(runGemm(r, big, rank, in, capacity)); });
    ASSERT_NE(exec, nullptr);
    for (int replay = 0; replay < 2; ++replay) {
      poisonBytes(r.heap, kHeap);
      WEFT_CUDA_OK(cudaGraphLaunch(exec, streamOf(r)));
      WEFT_CUDA_OK(cudaStreamSynchronize(streamOf(r)));
      EXPECT_TRUE(receivedGemm(r, big, rank, in, capacity)) << "replay " << replay;
    }
    WEFT_CUDA_OK(cudaGraphExecDestroy(exec));
    const PageRows ops = gemmRowsOnPage(dir, rank);
    EXPECT_GT(ops.all, 0) << "no GEMM op on this rank's page in " << dir;
    EXPECT_EQ(ops.flagged > 0, blas && gEngine == "launched") << ops.flagged << " of " << ops.all << " GEMM ops";
    closeRank(r);
  };
  EXPECT_TRUE(runRanks(ranks(), body));
}

WEFT_INSTANTIATE_ON_EVERY_BACKEND(GpuGemm);

// The blas path's route runs in a kernel without the multiply (gpu/gemm_kernel.cu), and on one rank
// in a copy kernel of its own: in the GEMM's own kernel (255 registers, spills, 230 KB of shared
// memory) the same items took 24 us of device time where the route kernel takes 17 (one H200, 128
// rows of 4096). A change that puts the multiply's weight back into either is caught here, without
// a timing. Asked in a rank of its own (GpuGemvKernel.KeepsItsStateInRegisters says why).
TEST(GpuGemmRouteKernel, CarriesNoneOfTheMultiplysWeight) {
  WEFT_REQUIRE_GPUS(1);
  const RankBody body = [](int, int, const weft_unique_id_t&) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    for (const bool proxied : {false, true}) {
      const char* variant = proxied ? "proxied" : "direct";
      gpu::KernelResources gemm;
      gpu::Outcome o = gpu::kernelResources(dev::OpKind::kGemmAllToAll, proxied, &gemm);
      ASSERT_TRUE(o) << o.message;
      for (const gpu::GemmVariant kernel : {gpu::GemmVariant::kRoute, gpu::GemmVariant::kSoloRoute}) {
        const char* name = kernel == gpu::GemmVariant::kRoute ? "route" : "one-rank route";
        gpu::KernelResources route;
        o = gpu::kernelResources(dev::OpKind::kGemmAllToAll, proxied, &route, kernel);
        ASSERT_TRUE(o) << o.message;
        std::printf("%s GEMM %s kernel: %d registers, %zu bytes of stack; the GEMM's: %d, %zu\n", variant, name,
                    route.registers, route.localBytes, gemm.registers, gemm.localBytes);
        EXPECT_EQ(route.localBytes, 0u) << variant << " " << name << " kernel spills";
        EXPECT_LE(route.registers, 160) << variant << " " << name << " kernel: " << route.registers
                                        << " registers (the GEMM's kernel: " << gemm.registers << ")";
      }
    }
  };
  EXPECT_TRUE(runRanks(1, body));
}

}  // namespace
}  // namespace weft::test
