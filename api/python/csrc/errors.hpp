// weft's result codes as Python exceptions: a bad argument is a ValueError (nothing happened, the
// communicator still works), anything else a RuntimeError; both carry weft's own message.
#pragma once

#include <c10/util/Exception.h>
#include <weft/weft.h>

namespace weft::torch_ext {

// Throws unless `r` is WEFT_SUCCESS; `call` names the C function. Reads the thread's last error
// at once, before any other weft call can replace it.
inline void check(weft_result_t r, const char* call) {
  if (r == WEFT_SUCCESS) return;
  const char* detail = weft_get_last_error(nullptr);
  TORCH_CHECK_VALUE(r != WEFT_ERR_INVALID_ARGUMENT, call, ": ", weft_get_error_string(r), ": ", detail);
  TORCH_CHECK(false, call, ": ", weft_get_error_string(r), " (weft result ", static_cast<int>(r), "): ", detail);
}

}  // namespace weft::torch_ext
