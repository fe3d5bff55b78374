// libFuzzer target: a failure record as the host reads it from a communicator's queue header or a
// status page (weftctl reads other processes' pages, so any bytes): failureText must describe every
// record, a signature mismatch included, without reading outside it or throwing. A record of two
// signature words that differ must be described as such.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "device/queue_device.hpp"
#include "device/signature_device.hpp"
#include "runtime/work_queue.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weft;
  dev::WaitRecord r{};
  memcpy(&r, data, size < sizeof r ? size : sizeof r);
  // The byte after the record, if any, is the reader's own rank (-1: unknown).
  const int self = size > sizeof r ? static_cast<int>(data[sizeof r]) - 1 : -1;
  const std::string text = failureText(r, self);
  if (text.empty()) abort();
  // Two words of the same op whose signatures differ: the message names the disagreement.
  if (r.status == static_cast<uint32_t>(dev::Status::kMismatch) && (r.expected >> 32) == (r.observed >> 32) &&
      r.expected != r.observed && static_cast<uint32_t>(r.expected) != 0 && static_cast<uint32_t>(r.observed) != 0 &&
      text.find(" differ in ") == std::string::npos)
    abort();
  return 0;
}
