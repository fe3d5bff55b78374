// Typed errors of the host layers. Setup code throws weft::Error; the C boundary maps it to the
// weft_result_t of the same value and keeps the message for weft_get_last_error.
#pragma once

#include <stdexcept>
#include <string>

namespace weft {

// Values equal weft_result_t's (api/include/weft/weft.h), checked there by static_assert.
enum class Code : int {
  kSuccess = 0,
  kInvalidArgument = 1,
  kInvalidUsage = 2,
  kNotSupported = 3,
  kOutOfMemory = 4,
  kSystem = 5,
  kTransport = 6,
  kTimeout = 7,
  kAborted = 8,
  kInternal = 9,
};

class Error : public std::runtime_error {
 public:
  Error(Code code, const std::string& what) : std::runtime_error(what), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

// Throws kSystem with "<what>: <strerror(errno)>".
[[noreturn]] void throwSystemError(const std::string& what);
// The same message without throwing.
std::string systemErrorMessage(const std::string& what, int err);

}  // namespace weft
