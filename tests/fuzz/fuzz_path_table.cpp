// libFuzzer target: a path table's text (path_table_file), parsed, asked for a path of every op,
// and written back row by row (what weftctl tune measure writes must parse again).
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.hpp"
#include "runtime/path_table.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const weft::PathTable t = weft::PathTable::parse(text, "fuzz");
    for (weft::FusedOp op :
         {weft::FusedOp::kGemvAllReduce, weft::FusedOp::kGemmAllToAll, weft::FusedOp::kEmbeddingAllToAll})
      for (int ranks : {1, 2, 8})
        for (uint64_t size : {uint64_t{1}, uint64_t{64}}) (void)t.choose(op, {"cpu", ranks, 1}, {{size, 8192, 1024}});
    std::string again;
    for (const weft::PathRow& r : t.rows()) again += weft::formatRow(r) + "\n";
    if (weft::PathTable::parse(again, "again").fingerprint() != t.fingerprint()) __builtin_trap();
  } catch (const weft::Error&) {
  }
  return 0;
}
