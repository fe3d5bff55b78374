#include "error.hpp"

#include <cerrno>
#include <cstring>

namespace weft {

std::string systemErrorMessage(const std::string& what, int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer, which may not be buf.
  const char* msg = strerror_r(err, buf, sizeof buf);
  return what + ": " + msg;
}

void throwSystemError(const std::string& what) { throw Error(Code::kSystem, systemErrorMessage(what, errno)); }

}  // namespace weft
