// Host side of the work queue (protocol in device/queue_device.hpp). The ring lives in shared
// memory from the start, so a submitter in another process (weftd clients) can use it.
// Thread-safe: several threads may submit at once; ticket order is the order ops execute in.
#pragma once

#include <cstdint>
#include <string>

#include "device/queue_device.hpp"
#include "transport/p2p/shm_segment.hpp"

namespace weft {

class WorkQueue {
 public:
  explicit WorkQueue(uint32_t depth);

  dev::QueueHeader* header() const { return header_; }
  dev::QueueSlot* slots() const { return slots_; }
  uint32_t depth() const { return header_->depth; }

  // Takes the next ticket. Callers that must agree with peers on op order take it under their lock.
  uint64_t reserve();
  // Waits (bounded by timeoutNs, abortable) until the ticket's slot is free, then publishes `desc`.
  // Returns kTimeout / kAborted / kPeerFailed without publishing; the queue is then unusable and the
  // failure is recorded in the header.
  dev::Status publish(uint64_t ticket, const dev::OpDesc& desc, bool hostWaits, uint64_t timeoutNs);
  // Host wait for an op published with hostWaits: returns its status and frees the slot. Bounded
  // by engine progress: gives up when nothing moved for `stallNs`; after an abort, gives the
  // engine `abortGraceNs` to finish the op before returning kAborted.
  dev::Status wait(uint64_t ticket, uint64_t stallNs, uint64_t abortGraceNs);

  // Human-readable first failure of the communicator ("" if none).
  std::string failureText() const;

 private:
  transport::ShmSegment shm_;
  dev::QueueHeader* header_;
  dev::QueueSlot* slots_;
};

const char* waitWhatName(dev::WaitWhat w);

}  // namespace weft
