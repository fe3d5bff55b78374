#include "weftd_inputs.hpp"

#include <iterator>
#include <string>

#include "common/error.hpp"
#include "device/dtype_device.hpp"
#include "device/ops/embedding/embedding_alltoall_device.hpp"
#include "runtime/backend.hpp"

namespace weft::service {

WeftdInputs::WeftdInputs(Client& daemon, const uint8_t* heap, uint64_t heapBytes, uint64_t weftdHeap)
    : daemon_(daemon), heap_(heap), heapBytes_(heapBytes), weftdHeap_(weftdHeap) {}

uint64_t WeftdInputs::place(uint64_t ptr, uint64_t bytes, const char* arg) {
  if (ptr == 0) return 0;
  const auto lo = reinterpret_cast<uint64_t>(heap_);
  // The communicator has checked that an input touching the heap lies in one of its blocks.
  if (ptr >= lo && ptr - lo < heapBytes_) return weftdHeap_ + (ptr - lo);
  const DeviceAllocation a = deviceAllocationOf(reinterpret_cast<const void*>(ptr), arg);
  if (bytes > a.size - (ptr - a.base))
    throw Error(Code::kInvalidArgument, std::string(arg) + ": " + std::to_string(bytes) +
                                            " bytes run past the end of its allocation (" + std::to_string(a.size) +
                                            " bytes)");
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = byId_.find(a.id);
  if (it == byId_.end()) {
    // A cached allocation that overlaps this live one has been freed: weftd lets its mapping go
    // when it maps this one (the driver would refuse to map the memory twice).
    for (auto old = byId_.begin(); old != byId_.end();)
      old = old->second.base < a.base + a.size && a.base < old->second.base + old->second.size ? byId_.erase(old)
                                                                                               : std::next(old);
    it = byId_.emplace(a.id, Mapped{a.base, a.size, daemon_.mapMemory(a.handle, a.base, a.size)}).first;
  }
  return it->second.weftd + (ptr - a.base);
}

void WeftdInputs::prepare(dev::OpDesc& d, int nranks) {
  dev::OpDesc out = d;
  const uint64_t es = dev::dtypeSize(static_cast<dev::DType>(d.dtype));
  const auto n = static_cast<uint64_t>(nranks);
  switch (static_cast<dev::OpKind>(d.kind)) {
    case dev::OpKind::kAllReduce:
    case dev::OpKind::kAllReduceOneShot:
      out.send = place(d.send, d.count * es, "sendbuf");
      break;
    case dev::OpKind::kAllToAll:
      out.send = place(d.send, d.count * es * n, "sendbuf");
      break;
    case dev::OpKind::kGemv:
    case dev::OpKind::kGemvAllReduce: {  // send = x [batch, k], w [n, k]
      const dev::GemvOpArgs& g = d.args.gemv;
      out.send = place(d.send, g.batch * g.k * es, "x");
      out.args.gemv.w = place(g.w, d.count * g.k * es, "w");
      break;
    }
    case dev::OpKind::kEmbeddingAllToAll: {
      // The weights' and lookups' sizes are in the rank's device memory: whole allocations are
      // mapped, and the engine checks every index against its table (check_indices is forced on).
      const dev::EmbeddingOpArgs& e = d.args.embedding;
      dev::EmbeddingOpArgs& to = out.args.embedding;
      out.send = place(d.send, 0, "weights");
      to.tableOffsets = place(e.tableOffsets, (e.numTables + 1) * sizeof(int64_t), "table_offsets");
      to.indices = place(e.indices, 0, "indices");
      to.offsets = place(e.offsets, 0, "offsets");
      to.perSampleWeights = place(e.perSampleWeights, 0, "per_sample_weights");
      to.flags |= dev::EmbeddingAllToAllOp::kFlagCheck;
      break;
    }
    default:
      break;  // no pointers
  }
  d = out;
}

}  // namespace weft::service
