#include "comm_state.hpp"

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "device.hpp"
#include "errors.hpp"

namespace weft::torch_ext {
namespace {

// Flags per AllReduce of a flush; more live blocks take several rounds.
constexpr int64_t kControlSlots = 1024;

std::mutex registryMutex;
std::unordered_map<int64_t, std::shared_ptr<CommState>>& registry() {
  static auto* r = new std::unordered_map<int64_t, std::shared_ptr<CommState>>;
  return *r;
}

}  // namespace

CommState::CommState(weft_comm_t comm) : comm_(comm), device_(currentDevice()) {}

std::shared_ptr<CommState> CommState::create(weft_comm_t comm) {
  std::shared_ptr<CommState> s(new CommState(comm));
  try {
    check(weft_comm_rank(comm, &s->rank_), "weft_comm_rank");
    check(weft_comm_size(comm, &s->size_), "weft_comm_size");
    void* p = nullptr;
    check(weft_mem_alloc(comm, kControlSlots * sizeof(float), &p), "weft_mem_alloc");
    s->control_ = at::from_blob(p, {kControlSlots}, at::TensorOptions().dtype(at::kFloat).device(s->device_));
  } catch (...) {
    s->destroy(false);
    throw;
  }
  return s;
}

CommState::~CommState() { destroy(false); }

at::Tensor CommState::empty(c10::IntArrayRef sizes, c10::ScalarType dtype) {
  TORCH_CHECK(!destroyed_, "weft.Comm.empty: the communicator was destroyed");
  flush();
  const auto options = at::TensorOptions().dtype(dtype).device(device_);
  int64_t numel = 1;
  for (int64_t d : sizes) {
    TORCH_CHECK_VALUE(d >= 0, "weft.Comm.empty: shape: negative dimension ", d);
    numel *= d;
  }
  // A tensor without elements is never read or written by a peer: no block, no collective call.
  if (numel == 0) return at::empty(sizes, options);
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  void* p = nullptr;
  check(weft_mem_alloc(comm_, bytes, &p), "weft_mem_alloc");
  const uint64_t seq = nextSeq_++;
  std::weak_ptr<CommState> self = weak_from_this();
  at::Tensor t = at::from_blob(
      p, sizes,
      [self, seq](void*) {
        if (auto s = self.lock()) s->release(seq);
      },
      options);
  blocks_.emplace(seq, Block{p, bytes, t.storage().getWeakStorageImpl()});
  byAddress_.emplace(reinterpret_cast<uintptr_t>(p), seq);
  return t;
}

void CommState::release(uint64_t seq) {
  std::lock_guard<std::mutex> lock(releasedMutex_);
  released_.insert(seq);
}

size_t CommState::releasedBlocks() {
  std::lock_guard<std::mutex> lock(releasedMutex_);
  return released_.size();
}

void CommState::flush() {
  TORCH_CHECK(!destroyed_, "weft.Comm: the communicator was destroyed");
  // blocks_ is the same list on every rank (allocated and freed collectively), so every rank
  // makes the same number of AllReduce calls here.
  if (blocks_.empty()) return;
  std::vector<uint64_t> seqs;
  seqs.reserve(blocks_.size());
  for (const auto& [seq, block] : blocks_) seqs.push_back(seq);
  std::set<uint64_t> releasedHere;
  {
    std::lock_guard<std::mutex> lock(releasedMutex_);
    releasedHere = released_;
  }
  std::vector<uint64_t> toFree;
  for (size_t first = 0; first < seqs.size(); first += kControlSlots) {
    const int64_t n = std::min<int64_t>(kControlSlots, static_cast<int64_t>(seqs.size() - first));
    std::vector<float> flags(n);
    for (int64_t i = 0; i < n; ++i) flags[i] = releasedHere.count(seqs[first + i]) ? 1.0f : 0.0f;
    at::Tensor slots = control_.narrow(0, 0, n);
    slots.copy_(at::from_blob(flags.data(), {n}, at::kFloat));
    check(weft_allreduce(comm_, slots.data_ptr(), slots.data_ptr(), n, WEFT_FLOAT32, currentStream(device_)),
          "weft_allreduce");
    const at::Tensor sums = slots.to(at::kCPU);
    const float* sum = sums.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i)
      if (sum[i] == static_cast<float>(size_)) toFree.push_back(seqs[first + i]);
  }
  if (toFree.empty()) return;
  waitForDevice(device_);
  for (uint64_t seq : toFree) {
    const Block& b = blocks_.at(seq);
    check(weft_mem_free(comm_, b.ptr), "weft_mem_free");
    byAddress_.erase(reinterpret_cast<uintptr_t>(b.ptr));
    blocks_.erase(seq);
    std::lock_guard<std::mutex> lock(releasedMutex_);
    released_.erase(seq);
  }
}

void CommState::barrier() {
  flush();
  at::Tensor one = control_.narrow(0, 0, 1);
  one.fill_(1.0f);
  check(weft_allreduce(comm_, one.data_ptr(), one.data_ptr(), 1, WEFT_FLOAT32, currentStream(device_)),
        "weft_allreduce");
  const float arrived = one.item<float>();
  TORCH_CHECK(arrived == static_cast<float>(size_), "weft.Comm.barrier: ", arrived, " of ", size_, " ranks arrived");
}

void CommState::detachLiveTensors() {
  // Old data pointers are dropped only after the loop: their deleters call release().
  std::vector<at::DataPtr> dropped;
  for (auto& [seq, block] : blocks_) {
    c10::intrusive_ptr<c10::StorageImpl> storage = block.storage.lock();
    if (!storage) continue;
    const size_t bytes = storage->nbytes();
    at::DataPtr fresh = c10::GetAllocator(device_.type())->allocate(bytes);
    const auto byteOptions = at::TensorOptions().dtype(at::kByte).device(device_);
    const auto n = static_cast<int64_t>(bytes);
    at::from_blob(fresh.get(), {n}, byteOptions).copy_(at::from_blob(block.ptr, {n}, byteOptions));
    dropped.push_back(storage->set_data_ptr(std::move(fresh)));
  }
  waitForDevice(device_);
}

void CommState::destroy(bool finalize) {
  if (destroyed_) return;
  destroyed_ = true;
  detachLiveTensors();
  control_ = at::Tensor();
  blocks_.clear();
  byAddress_.clear();
  weft_result_t finalized = WEFT_SUCCESS;
  std::string finalizeError;
  if (finalize) {
    finalized = weft_comm_finalize(comm_);
    if (finalized != WEFT_SUCCESS) finalizeError = weft_get_last_error(nullptr);
  }
  // Local, and frees the heap whatever finalize said.
  weft_comm_destroy(comm_);
  TORCH_CHECK(finalized == WEFT_SUCCESS, "weft_comm_finalize: ", weft_get_error_string(finalized), ": ", finalizeError);
}

bool CommState::inHeap(const void* p, size_t bytes) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = byAddress_.upper_bound(a);
  if (it == byAddress_.begin()) return false;
  --it;
  const Block& b = blocks_.at(it->second);
  return a + bytes <= it->first + b.bytes;
}

int64_t registerComm(std::shared_ptr<CommState> s) {
  const auto handle = static_cast<int64_t>(reinterpret_cast<intptr_t>(s->handle()));
  std::lock_guard<std::mutex> lock(registryMutex);
  registry()[handle] = std::move(s);
  return handle;
}

std::shared_ptr<CommState> lookupComm(int64_t handle, const char* op) {
  std::lock_guard<std::mutex> lock(registryMutex);
  auto it = registry().find(handle);
  TORCH_CHECK_VALUE(it != registry().end(), op, ": comm: ", handle,
                    " is not a live weft communicator (destroyed, or not from weft.Comm)");
  return it->second;
}

void unregisterComm(int64_t handle) {
  std::shared_ptr<CommState> s;
  {
    std::lock_guard<std::mutex> lock(registryMutex);
    auto it = registry().find(handle);
    if (it == registry().end()) return;
    s = std::move(it->second);
    registry().erase(it);
  }
}

}  // namespace weft::torch_ext
