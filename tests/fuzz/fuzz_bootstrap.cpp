// libFuzzer target: what arrives on rank 0's bootstrap port from a joining rank (a hello, checked
// against the job's secret and the ranks already joined) and what a joining rank reads back (rank
// 0's verdict).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "runtime/bootstrap_wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft::Hello hello{};
  memcpy(&hello, data, size < sizeof hello ? size : sizeof hello);
  weft::Secret secret{};
  std::string why;
  const int nranks = 1 + static_cast<int>(size % 7);
  (void)weft::helloBytes(hello, size);
  (void)weft::checkHello(
      hello, secret, nranks, "weft 0.1.0, cpu backend", [&](int r) { return r % 2 == 0; }, &why);
  weft::Verdict verdict{};
  if (size > sizeof hello) {
    const size_t rest = size - sizeof hello;
    memcpy(&verdict, data + sizeof hello, rest < sizeof verdict ? rest : sizeof verdict);
  }
  const weft::Error e = weft::verdictError(verdict);
  (void)e.what();
  return 0;
}
