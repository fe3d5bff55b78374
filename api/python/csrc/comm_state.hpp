// One communicator as the extension sees it: the weft handle, the symmetric blocks handed out as
// tensors, and the rule that frees them.
//
// Lifetime rule. weft_mem_free is collective, but a tensor dies whenever Python drops its last
// reference: at different times on different ranks, on any thread (the garbage collector). So a
// storage's death only marks its block released (any thread, never blocks). Blocks are freed at
// the next collective point (empty, barrier): every rank contributes a 0/1 flag per live block,
// the flags are summed with weft_allreduce, and every rank frees, in allocation order, exactly the
// blocks all ranks released. A block released on some ranks only waits for the next point. destroy
// frees the rest with the communicator; tensors still alive then are moved to ordinary memory of
// the same device first (same values, no longer symmetric), so no tensor ever dangles.
//
// Thread safety: empty, flush, barrier and destroy are collective host calls and must not race
// with each other or with ops on the same communicator (weft.h); release may come from any thread.
#pragma once

#include <ATen/ATen.h>
#include <weft/weft.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>

namespace weft::torch_ext {

class CommState : public std::enable_shared_from_this<CommState> {
 public:
  // Takes ownership of `comm`; collective (allocates the control block).
  static std::shared_ptr<CommState> create(weft_comm_t comm);
  ~CommState();
  CommState(const CommState&) = delete;
  CommState& operator=(const CommState&) = delete;

  weft_comm_t handle() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const c10::Device& device() const { return device_; }

  // Collective: a tensor over a new block of the symmetric heap (after a flush).
  at::Tensor empty(c10::IntArrayRef sizes, c10::ScalarType dtype);
  // Collective: frees the blocks every rank has released.
  void flush();
  // Collective: a flush, then an AllReduce that no rank leaves before every rank has entered it.
  void barrier();
  // Collective when `finalize` (weft_comm_finalize first), local otherwise; idempotent.
  void destroy(bool finalize);

  // Whether [p, p + bytes) lies inside one live block of this communicator.
  bool inHeap(const void* p, size_t bytes) const;
  size_t liveBlocks() const { return blocks_.size(); }
  size_t releasedBlocks();

 private:
  explicit CommState(weft_comm_t comm);
  void release(uint64_t seq);
  void detachLiveTensors();

  struct Block {
    void* ptr;
    size_t bytes;
    c10::weak_intrusive_ptr<c10::StorageImpl> storage;
  };

  weft_comm_t comm_;
  int rank_ = 0;
  int size_ = 1;
  c10::Device device_;
  bool destroyed_ = false;
  at::Tensor control_;                       // float32 flags, summed across ranks by flush
  uint64_t nextSeq_ = 0;                     // allocation order: the same on every rank
  std::map<uint64_t, Block> blocks_;         // live blocks by allocation order
  std::map<uintptr_t, uint64_t> byAddress_;  // block start -> seq, for inHeap
  std::mutex releasedMutex_;
  std::set<uint64_t> released_;  // written by storage deleters, from any thread
};

// Handles given to Python (the weft_comm_t's value; weft never reuses one).
int64_t registerComm(std::shared_ptr<CommState> s);
std::shared_ptr<CommState> lookupComm(int64_t handle, const char* op);
void unregisterComm(int64_t handle);

}  // namespace weft::torch_ext
