#include "runtime/signature.hpp"

#include "device/signature_device.hpp"

namespace weft {

uint32_t sigHash(std::initializer_list<uint64_t> values) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (const uint64_t x : values) {
    // splitmix64's finaliser over the running value: every bit of every value reaches every bit.
    h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return static_cast<uint32_t>(h ^ (h >> 12) ^ (h >> 24) ^ (h >> 36) ^ (h >> 48)) & dev::kSigHashMask;
}

namespace {

const char* opName(uint32_t op) {
  switch (static_cast<dev::SigOp>(op)) {
    case dev::SigOp::kAllReduce:
      return "weft_allreduce";
    case dev::SigOp::kAllToAll:
      return "weft_alltoall";
    case dev::SigOp::kGemvAllReduce:
      return "weft_gemv_allreduce";
    case dev::SigOp::kEmbeddingAllToAll:
      return "weft_embedding_alltoall";
    case dev::SigOp::kGemmAllToAll:
      return "weft_gemm_alltoall";
  }
  return "an unknown op";
}

const char* dtypeName(uint32_t dt) {
  switch (static_cast<dev::DType>(dt)) {
    case dev::DType::kFloat32:
      return "float32";
    case dev::DType::kFloat16:
      return "float16";
    case dev::DType::kBFloat16:
      return "bfloat16";
  }
  return "an unknown dtype";
}

// What the shape hash covers, and which buffer's heap offset peers write into, per op.
const char* shapeName(uint32_t op) {
  switch (static_cast<dev::SigOp>(op)) {
    case dev::SigOp::kAllReduce:
      return "the count";
    case dev::SigOp::kAllToAll:
      return "the count (count_per_rank)";
    case dev::SigOp::kGemvAllReduce:
      return "the shape (batch, n, k_local)";
    case dev::SigOp::kEmbeddingAllToAll:
      return "the shape (local_batch, total_tables, dim)";
    case dev::SigOp::kGemmAllToAll:
      return "the shape (h)";
  }
  return "the counts or shape";
}
const char* outputName(uint32_t op) {
  switch (static_cast<dev::SigOp>(op)) {
    case dev::SigOp::kAllReduce:
    case dev::SigOp::kAllToAll:
      return "recvbuf";
    case dev::SigOp::kGemvAllReduce:
      return "y";
    default:
      return "recv";
  }
}

}  // namespace

std::string mismatchText(const dev::WaitRecord& r, int self) {
  const auto mine = static_cast<uint32_t>(r.expected), theirs = static_cast<uint32_t>(r.observed);
  const std::string me = self >= 0 ? "rank " + std::to_string(self) : std::string("this rank");
  const std::string peer = "rank " + std::to_string(r.peer);
  std::string what;
  if ((r.expected >> 32) != (r.observed >> 32)) {
    what = "how many ops they have run (" + me + " is at its collective op #" + std::to_string((r.expected >> 32) - 1) +
           ", " + peer + " at #" + std::to_string((r.observed >> 32) - 1) +
           "): every rank must call the same ops in the same order";
  } else if (mine == 0 || theirs == 0) {
    what = "one of them does not check signatures (check_signatures must be the same on every rank)";
  } else if (dev::sigOp(mine) != dev::sigOp(theirs)) {
    what = std::string("the op kind: ") + me + " called " + opName(dev::sigOp(mine)) + ", " + peer + " " +
           opName(dev::sigOp(theirs));
  } else if (dev::sigDtype(mine) != dev::sigDtype(theirs)) {
    what = std::string("the dtype: ") + me + " passed " + dtypeName(dev::sigDtype(mine)) + ", " + peer + " " +
           dtypeName(dev::sigDtype(theirs));
  } else if (dev::sigShape(mine) != dev::sigShape(theirs)) {
    what = std::string(shapeName(dev::sigOp(mine))) + ", which must be the same on every rank";
  } else {
    what = std::string("the heap offset of ") + outputName(dev::sigOp(mine)) +
           ", which peers write into: every rank must pass the same weft_mem_alloc block";
  }
  return "ranks disagree in op #" + std::to_string(r.ticket) + " (" + opName(dev::sigOp(mine)) + "): " + me + " and " +
         peer + " differ in " + what + "; the op failed on every rank and wrote no output (signature " + "words " +
         std::to_string(r.expected) + " and " + std::to_string(r.observed) + ")";
}

}  // namespace weft
