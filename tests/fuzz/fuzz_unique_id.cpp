// libFuzzer target: a unique id's 128 bytes as weft_comm_init_rank decodes them (a caller may pass
// any bytes), and the decoded id encoded again.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/error.hpp"
#include "runtime/unique_id.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint8_t bytes[weft::kUniqueIdBytes] = {};
  memcpy(bytes, data, size < sizeof bytes ? size : sizeof bytes);
  try {
    const weft::UniqueId id = weft::UniqueId::decode(bytes, "fuzz");
    uint8_t again[weft::kUniqueIdBytes];
    id.encode(again);
  } catch (const weft::Error&) {
  }
  return 0;
}
