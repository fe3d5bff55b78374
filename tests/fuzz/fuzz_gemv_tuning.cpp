// libFuzzer target: a GEMV tuning table's text (tuning_file), parsed and asked for a path.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.hpp"
#include "runtime/gemv_tuning.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const weft::GemvTuning t = weft::GemvTuning::parse(text, "fuzz");
    for (int ranks : {1, 2, 8})
      for (uint64_t batch : {uint64_t{1}, uint64_t{64}}) (void)t.choose(ranks, batch, 8192, 1024);
  } catch (const weft::Error&) {
  }
  return 0;
}
