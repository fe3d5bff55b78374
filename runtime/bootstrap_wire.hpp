// What ranks send each other while they join a communicator: a joining rank's hello to rank 0,
// and rank 0's verdict. Both arrive from the network, so each is checked here, in one place that
// the fuzzers (tests/fuzz) reach, before anything in it is used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/build_info.hpp"
#include "common/error.hpp"
#include "unique_id.hpp"

namespace weft {

constexpr uint32_t kHelloMagic = 0x6f6c6568;  // "helo"
constexpr uint32_t kBootstrapProtocol = 2;    // 2: the build identity
constexpr size_t kBuildBytes = 96;

// From protocol 2 on, a hello's size and the place of each field stay as they are, so that rank 0
// reads a whole one from a rank of any later weft and names that rank's build, instead of leaving
// it to wait for its deadline. A later protocol changes what follows the join, not this.
struct Hello {
  uint32_t magic;
  uint32_t protocol;
  uint8_t secret[kSecretBytes];
  int32_t nranks;
  int32_t rank;
  char build[kBuildBytes];  // helloBuild(), NUL-terminated
};
static_assert(sizeof(Hello) == 144 && offsetof(Hello, secret) == 8 && offsetof(Hello, rank) == 44 &&
                  offsetof(Hello, build) == 48,
              "a hello's size and layout stay as protocol 2 made them");
// Protocol 1's hello: the fields before `build`, no more. Such a rank waits for a verdict, which has
// not changed since, so it is told, not left to its deadline.
constexpr size_t kHelloV1Bytes = offsetof(Hello, build);

// The bytes a hello of which `got` have arrived needs in all: protocol 1's are fewer.
inline size_t helloBytes(const Hello& h, size_t got) {
  return got >= offsetof(Hello, secret) && h.protocol == 1 ? kHelloV1Bytes : sizeof(Hello);
}

// This build's identity as a hello carries it (cut to fit), which is what rank 0 compares.
inline std::string helloBuild() { return buildIdentity().substr(0, kBuildBytes - 1); }

struct Verdict {
  int32_t code;  // Code
  char message[252];
};
static_assert(sizeof(Verdict) == 256);

// What rank 0 does with a hello: admit the rank; drop the connection (a stranger: wrong magic or
// secret); or fail the whole job (a rank of this job that runs another weft build than rank 0's,
// `build`, or disagrees on nranks, or names a rank out of range or already joined), with *why
// set. `joined(r)` says whether rank r has joined.
//
// Builds must match whole: two builds may lay out the heap, agree on settings at init or run an op
// differently, and ranks that differ so wait on each other until their timeout, or worse.
enum class HelloCheck { kAdmit, kDrop, kFailJob };
template <class Joined>
HelloCheck checkHello(const Hello& h, const Secret& secret, int nranks, const std::string& build, Joined&& joined,
                      std::string* why) {
  Secret got;
  for (size_t i = 0; i < kSecretBytes; ++i) got[i] = h.secret[i];
  if (h.magic != kHelloMagic || !secretsEqual(got, secret)) return HelloCheck::kDrop;
  const std::string theirs = h.protocol < 2 ? std::string("an older weft, which names no build")
                                            : std::string(h.build, strnlen(h.build, sizeof h.build));
  if (h.protocol != kBootstrapProtocol || theirs != build) {
    *why = "every rank of a job must run the same weft build: rank " + std::to_string(h.rank) + " runs " +
           (theirs.empty() ? "an unnamed build" : theirs) + " (bootstrap protocol " + std::to_string(h.protocol) +
           "), rank 0 runs " + build + " (protocol " + std::to_string(kBootstrapProtocol) + ")";
    return HelloCheck::kFailJob;
  }
  if (h.nranks != nranks) {
    *why = "nranks: rank " + std::to_string(h.rank) + " passed " + std::to_string(h.nranks) + ", rank 0 passed " +
           std::to_string(nranks);
    return HelloCheck::kFailJob;
  }
  if (h.rank <= 0 || h.rank >= nranks || joined(h.rank)) {
    *why = "rank: " + std::to_string(h.rank) + " joined twice or is out of range";
    return HelloCheck::kFailJob;
  }
  return HelloCheck::kAdmit;
}

// The error rank 0's verdict carries, or kSuccess. A code weft does not know is itself an error.
inline Error verdictError(const Verdict& v) {
  std::string message(v.message, strnlen(v.message, sizeof v.message));
  if (v.code < static_cast<int32_t>(Code::kSuccess) || v.code > static_cast<int32_t>(Code::kInternal))
    return Error(Code::kInternal, "rank 0 answered the join with an unknown verdict (" + std::to_string(v.code) + ")");
  return Error(static_cast<Code>(v.code), message);
}

}  // namespace weft
