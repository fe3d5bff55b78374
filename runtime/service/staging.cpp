#include "staging.hpp"

#include <cstring>
#include <initializer_list>
#include <string>

#include "common/error.hpp"
#include "device/dtype_device.hpp"
#include "device/ops/embedding/embedding_alltoall_device.hpp"

namespace weft::service {

namespace {

// An int64 the caller left in its memory (a table's end, a bag count), as a byte count's factor.
uint64_t countAt(uint64_t ptr, uint64_t index, const char* arg) {
  int64_t v = 0;
  if (ptr) memcpy(&v, reinterpret_cast<const int64_t*>(ptr) + index, sizeof v);
  if (v < 0)
    throw Error(Code::kInvalidArgument, std::string(arg) + ": holds a negative count (" + std::to_string(v) + ")");
  return static_cast<uint64_t>(v);
}

// weftd's engine reads the ranges these give: they must rise from 0 to their last entry, or a
// bag or table would reach past what was staged (embedded mode reads the caller's memory instead).
void checkRising(uint64_t ptr, uint64_t entries, const char* arg) {
  const auto* v = reinterpret_cast<const int64_t*>(ptr);
  for (uint64_t i = 0; i < entries; ++i)
    if (v[i] < 0 || (i > 0 && v[i] < v[i - 1]))
      throw Error(Code::kInvalidArgument, std::string(arg) + ": entry " + std::to_string(i) + " (" +
                                              std::to_string(v[i]) + ") is negative or below the one before");
}

}  // namespace

Staging::Staging(transport::ShmSegment segment, uint64_t weftdStaging, const uint8_t* heap, uint64_t heapBytes,
                 uint64_t weftdHeap)
    : segment_(std::move(segment)),
      weftdStaging_(weftdStaging),
      heap_(heap),
      heapBytes_(heapBytes),
      weftdHeap_(weftdHeap) {}

namespace {

// The product of sizes that reach here from the caller's memory (the embedding's offsets) or from
// its descriptor; one that wraps would stage a short range that weftd's engine then reads past.
uint64_t bytesOf(std::initializer_list<uint64_t> factors, const char* arg) {
  uint64_t p = 1;
  for (uint64_t f : factors)
    if (__builtin_mul_overflow(p, f, &p))
      throw Error(Code::kInvalidArgument, std::string(arg) + ": its size overflows 64 bits");
  return p;
}

}  // namespace

uint64_t Staging::place(uint64_t ptr, uint64_t bytes, const char* arg, bool output) {
  if (ptr == 0 || bytes == 0) return 0;
  const auto lo = reinterpret_cast<uint64_t>(heap_);
  // The communicator has checked that an input touching the heap lies in one of its blocks.
  if (ptr >= lo && ptr - lo < heapBytes_) return weftdHeap_ + (ptr - lo);
  const uint64_t at = (used_ + 63) / 64 * 64;  // vector loads and the GEMM tile want aligned rows
  if (bytes > segment_.size() || at > segment_.size() - bytes)
    throw Error(Code::kInvalidArgument,
                std::string(arg) + ": " + std::to_string(bytes) +
                    " bytes outside the symmetric heap, with the op's other such inputs, do not fit weftd's staging "
                    "segment (service_staging_bytes = " +
                    std::to_string(segment_.size()) + "); put it in weft_mem_alloc memory or raise the setting");
  memcpy(static_cast<uint8_t*>(segment_.data()) + at, reinterpret_cast<const void*>(ptr), bytes);
  if (output) outputs_.push_back({reinterpret_cast<void*>(ptr), at, bytes});
  used_ = at + bytes;
  return weftdStaging_ + at;
}

void Staging::prepare(dev::OpDesc& d, int nranks) {
  used_ = 0;
  outputs_.clear();
  const uint64_t es = dev::dtypeSize(static_cast<dev::DType>(d.dtype));
  const auto n = static_cast<uint64_t>(nranks);
  switch (static_cast<dev::OpKind>(d.kind)) {
    case dev::OpKind::kAllReduce:
    case dev::OpKind::kAllReduceOneShot:
      d.send = place(d.send, bytesOf({d.count, es}, "sendbuf"), "sendbuf", false);
      return;
    case dev::OpKind::kAllToAll:
      d.send = place(d.send, bytesOf({d.count, es, n}, "sendbuf"), "sendbuf", false);
      return;
    case dev::OpKind::kGemv:
    case dev::OpKind::kGemvAllReduce: {  // send = x [batch, k], w [n, k]
      dev::GemvOpArgs& g = d.args.gemv;
      d.send = place(d.send, bytesOf({g.batch, g.k, es}, "x"), "x", false);
      g.w = place(g.w, bytesOf({d.count, g.k, es}, "w"), "w", false);
      return;
    }
    case dev::OpKind::kEmbeddingAllToAll: {  // send = the weights [rows, count]
      dev::EmbeddingOpArgs& e = d.args.embedding;
      const uint64_t tables = e.numTables, bags = bytesOf({tables, e.localBatch, n}, "offsets");
      checkRising(e.tableOffsets, tables + 1, "table_offsets");
      checkRising(e.offsets, bags + 1, "offsets");
      const uint64_t rows = countAt(e.tableOffsets, tables, "table_offsets");
      const uint64_t lookups = countAt(e.offsets, bags, "offsets");
      // Every index is checked against its table on weftd's side, whatever check_indices says: an
      // index past the staged weights would make weftd's engine read outside them.
      e.flags |= dev::EmbeddingAllToAllOp::kFlagCheck;
      d.send = place(d.send, bytesOf({rows, d.count, es}, "weights"), "weights", false);
      e.tableOffsets = place(e.tableOffsets, (tables + 1) * sizeof(int64_t), "table_offsets", false);
      e.indices = place(e.indices, bytesOf({lookups, sizeof(int64_t)}, "indices"), "indices", false);
      e.offsets = place(e.offsets, (bags + 1) * sizeof(int64_t), "offsets", false);
      e.perSampleWeights = place(e.perSampleWeights, bytesOf({lookups, sizeof(float)}, "per_sample_weights"),
                                 "per_sample_weights", false);
      return;
    }
    case dev::OpKind::kGemmAllToAll: {  // send = a [tokens, k]
      dev::GemmOpArgs& m = d.args.gemm;
      d.send = place(d.send, bytesOf({m.tokens, m.k, es}, "a"), "a", false);
      m.w = place(m.w, bytesOf({m.experts, m.k, d.count, es}, "w"), "w", false);
      m.sendCounts = place(m.sendCounts, n * sizeof(int64_t), "send_counts", false);
      m.recvCounts = place(m.recvCounts, n * sizeof(int64_t), "recv_counts", true);
      m.expertEnds = place(m.expertEnds, m.experts * sizeof(int64_t), "expert_offsets", false);
      return;
    }
    default:
      return;  // no pointers
  }
}

void Staging::finish() {
  for (const Output& o : outputs_) memcpy(o.to, static_cast<const uint8_t*>(segment_.data()) + o.offset, o.bytes);
  outputs_.clear();
}

}  // namespace weft::service
