// libFuzzer target: bytes as weftd reads them from a connection, cut into frames by FrameReader in
// pieces of the sizes it asks for, each whole frame then decoded by every body decoder.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/service/wire.hpp"

using namespace weft::service;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FrameReader reader;
  // The first byte, if any, chooses the piece size (as reads of a socket vary); the rest is the stream.
  const size_t piece = size ? 1 + data[0] % 64 : 1;
  size_t at = size ? 1 : 0;
  for (;;) {
    Frame f;
    std::string why;
    const FrameReader::Result r = reader.next(&f, &why);
    if (r == FrameReader::Result::kBad) return 0;
    if (r == FrameReader::Result::kFrame) {
      Hello h;
      Welcome w;
      Refused x;
      Attach a;
      Attached d;
      StatusHead s;
      MapMemory m;
      MemoryMapped mm;
      std::vector<StatusRow> rows;
      decodeHello(f, &h, &why);
      decodeWelcome(f, &w, &why);
      decodeRefused(f, &x, &why);
      decodeAttach(f, &a, &why);
      decodeAttached(f, &d, &why);
      decodeStatus(f, &s, &rows, &why);
      decodeMapMemory(f, &m, &why);
      decodeMemoryMapped(f, &mm, &why);
      continue;
    }
    if (at >= size) return 0;
    size_t n = reader.want();
    if (n > piece) n = piece;
    if (n > size - at) n = size - at;
    reader.feed(data + at, n, {});
    at += n;
  }
}
