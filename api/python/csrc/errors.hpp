// weft's result codes as Python exceptions: a bad argument is a ValueError (nothing happened, the
// communicator still works), anything else a RuntimeError; both carry weft's own message.
#pragma once

#include <c10/util/Exception.h>
#include <weft/weft.h>

#include <string>

namespace weft::torch_ext {

// Throws unless `r` is WEFT_SUCCESS; `call` names the C function. Reads the thread's last error
// at once, before any other weft call can replace it.
//
// The message is made of strings only: a number streamed into c10::str's std::ostringstream goes
// through the locale's num_put facet, and an extension linked with a copy of libstdc++'s locale
// code (a compiler that links part of libstdc++ statically, as /opt/gcc on the GPU hosts did)
// looks that facet up by its own facet ids in the process's locale: it called another facet and
// crashed, so every failed weft call segfaulted instead of raising. scripts/gpu-python.sh refuses
// such a build; this keeps the one message every weft failure passes through safe regardless.
inline void check(weft_result_t r, const char* call) {
  if (r == WEFT_SUCCESS) return;
  std::string detail = weft_get_last_error(nullptr);
  // weft's messages usually start with the function's name already.
  if (detail.rfind(call, 0) != 0) detail = std::string(call) + ": " + detail;
  const std::string what = weft_get_error_string(r);
  TORCH_CHECK_VALUE(r != WEFT_ERR_INVALID_ARGUMENT, detail + " [" + what + "]");
  TORCH_CHECK(false, detail + " [" + what + ", weft result " + std::to_string(static_cast<int>(r)) + "]");
}

}  // namespace weft::torch_ext
