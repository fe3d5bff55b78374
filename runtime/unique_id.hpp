// The 128-byte unique id that names one communicator's bootstrap: where rank 0 listens and the
// random secret every rank must present. Opaque to callers (weft_unique_id_t).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "socket.hpp"

namespace weft {

constexpr size_t kUniqueIdBytes = 128;
constexpr size_t kSecretBytes = 32;
using Secret = std::array<uint8_t, kSecretBytes>;

struct UniqueId {
  net::SockAddr root;  // where rank 0 listens
  Secret secret{};

  void encode(uint8_t out[kUniqueIdBytes]) const;
  // Throws kInvalidArgument naming `what` if the bytes are not a weft unique id.
  static UniqueId decode(const uint8_t in[kUniqueIdBytes], const std::string& what);
};

Secret randomSecret();
// A secret derived from text every rank of a job shares (launcher environment).
Secret secretFromText(const std::string& text);
bool secretsEqual(const Secret& a, const Secret& b);  // constant time

// Creates the listening socket for a new id (weft_get_unique_id) and keeps it for this process's
// rank 0, which adopts it in takeListener. Advertised address from settings. A process keeps the
// listeners of its kMaxKeptListeners newest untaken ids; creating one more closes the oldest's, whose
// rank 0 then binds the same port again at init (which fails only if another socket took the port).
constexpr size_t kMaxKeptListeners = 64;
UniqueId createUniqueId(const std::string& addr, const std::string& ifname);
// The listener createUniqueId made for this id, if this process made one; else an invalid socket.
net::Socket takeListener(const UniqueId& id);

}  // namespace weft
