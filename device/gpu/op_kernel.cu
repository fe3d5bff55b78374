// An op launched as an ordinary kernel on the caller's stream, eagerly or captured into a graph:
// the same items as the persistent engine runs, assigned statically (block b takes items b,
// b + grid, ...), in increasing order so that every wait depends only on items the peers' blocks
// reach first. The grid must be co-resident (a few dozen blocks), as for any kernel whose blocks
// wait on each other's peers. One kernel per op family: a kernel's registers are those of its
// heaviest op, and the fused ops' code would otherwise cost the plain collectives theirs.
#include "../engine_device.hpp"
#include "persistent_kernel.hpp"

namespace weft::dev {

namespace {

// What every launched op kernel does around its items: read the protocol counters, run the
// block's items (run(coop, item, seq) -> Status), and let the last block move the counters on.
// `tile` is the group's shared memory (at least kCoopFloats).
template <class Run>
__device__ void runLaunched(const CommView& view, const OpDesc& desc, float* tile, Run&& run) {
  __shared__ unsigned long long scratch;
  const BlockCoop coop{&scratch, tile};
  // The counters are stable for the whole kernel: only the last block below changes them, after
  // every block read them. The leader reads them with the first item's stop check, in one round trip.
  struct Start {
    OpCounters counters;
    Status stop;
  };
  const Start start = coop.fromLeader<Start>([&] { return Start{loadCounters(view.control), stopReason(view)}; });
  const OpSeq seq = opSeq(start.counters, desc);
  for (uint32_t item = blockIdx.x; item < desc.nitems; item += gridDim.x) {
    // After any failure of the communicator the remaining items give up at once; the wait that
    // failed recorded why in the queue header.
    const Status stop =
        item == blockIdx.x ? start.stop : coop.broadcast(coop.leader() ? stopReason(view) : Status::kOk);
    if (stop != Status::kOk) break;
    if (run(coop, item, seq) != Status::kOk) break;
  }
  // The last block to leave moves the counters on for the communicator's next op, which starts
  // after this kernel (in stream or graph order). Every block counts, failed or not, so that the
  // ranks' counters stay alike.
  coop.sync();
  if (!coop.leader()) return;
  if (gridDim.x > 1) {
    const uint32_t before =
        gpu::atomicFetchAdd<gpu::Order::kAcqRel, gpu::Scope::kDevice>(&view.control->blocksDone, 1u);
    if (before + 1 != gridDim.x) return;
    gpu::atomicStore<gpu::Order::kRelaxed, gpu::Scope::kDevice>(&view.control->blocksDone, 0u);
  }
  storeCounters(view.control, advance(start.counters, desc, static_cast<uint32_t>(view.nranks)));
}

}  // namespace

__global__ void opKernel(CommView view, OpDesc desc) {
  __shared__ float tile[kCoopFloats];
  runLaunched(view, desc, tile, [&](const BlockCoop& c, uint32_t item, const OpSeq& seq) {
    return runCollectiveItem<BlockCoop, false>(c, view, desc, seq, item);
  });
}

// The one-shot AllReduce in 128-byte lines, a kernel of its own: a kernel's registers are those of
// its hungriest path, and this loop wants more than the 8-byte lines' (opKernel). With both in
// opKernel (127 registers) the 8-byte lines' small inputs were 0.1-0.2 us slower; in a kernel of
// their own (70 registers) 0.3 us slower after a GEMV (docs/perf.md, session 15).
__global__ void oneShotLinesKernel(CommView view, OpDesc desc) {
  __shared__ float tile[kCoopFloats];
  runLaunched(view, desc, tile, [&](const BlockCoop& c, uint32_t item, const OpSeq& seq) {
    return AllReduceOneShotOp::runIn<true>(c, view, desc, seq, item);
  });
}

__global__ void gemvKernel(CommView view, OpDesc desc) {
#if defined(WEFT_HAVE_MMA)
  GemvAllReduceOp::warmFirstSlice(desc, blockIdx.x, threadIdx.x, blockDim.x);
#endif
  const bool fused = static_cast<OpKind>(desc.kind) == OpKind::kGemvAllReduce;
  __shared__ float tile[kCoopFloats];
  runLaunched(view, desc, tile, [&](const BlockCoop& c, uint32_t item, const OpSeq& seq) {
    return fused ? GemvAllReduceOp::run(c, view, desc, seq, item) : GemvOp::run(c, view, desc, seq, item);
  });
}

// Two blocks of 256 threads per SM: with 8 rows in flight per lane the pooling loop wants 168
// registers (one block per SM); capped at 128 (96 bytes of spills) it ran 3% faster than 6 rows in
// flight without spills (docs/perf.md).
__global__ void __launch_bounds__(256, 2) embeddingKernel(CommView view, OpDesc desc) {
  __shared__ float tile[kCoopFloats];
  runLaunched(view, desc, tile, [&](const BlockCoop& c, uint32_t item, const OpSeq& seq) {
    return EmbeddingAllToAllOp::run(c, view, desc, seq, item);
  });
}

// The GEMM + All-to-All: the group's memory is dynamic (gemmSharedBytes), the coop's scratch
// followed by the tile pipeline; one block per SM.
__global__ void __launch_bounds__(tile::kThreads, 1)
    gemmKernel(CommView view, OpDesc desc, const WEFT_GRID_CONSTANT tile::GemmMaps maps) {
  extern __shared__ float4 dynamicShared[];
  float* group = reinterpret_cast<float*>(dynamicShared);
  // The route cache's tag and the uncounted rows: shared memory holds whatever the SM's last
  // kernel left. The copy engine's ring lives as long as the kernel.
  if (threadIdx.x == 0) GemmAllToAllOp::startGroup(RouteView{reinterpret_cast<int64_t*>(group), view.nranks});
#if defined(WEFT_HAVE_TMA_TILE)
  if (threadIdx.x == 0) tile::ringInit(tile::pipelineAt(group + kCoopFloats));
#endif
  runLaunched(view, desc, group, [&](const BlockCoop& c, uint32_t item, const OpSeq& seq) {
    return GemmAllToAllOp::run(c, view, desc, seq, item, &maps);
  });
#if defined(WEFT_HAVE_TMA_TILE)
  if (threadIdx.x == 0) tile::ringDrain(tile::pipelineAt(group + kCoopFloats));
#endif
}

}  // namespace weft::dev
