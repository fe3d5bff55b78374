// weft's result codes as Python exceptions: a bad argument is a ValueError (nothing happened, the
// communicator still works), anything else a RuntimeError; both carry weft's own message.
#pragma once

#include <c10/util/Exception.h>
#include <weft/weft.h>

#include <string>

namespace weft::torch_ext {

// Throws unless `r` is WEFT_SUCCESS; `call` names the C function. Reads the thread's last error
// at once, before any other weft call can replace it.
inline void check(weft_result_t r, const char* call) {
  if (r == WEFT_SUCCESS) return;
  std::string detail = weft_get_last_error(nullptr);
  // weft's messages usually start with the function's name already.
  if (detail.rfind(call, 0) != 0) detail = std::string(call) + ": " + detail;
  TORCH_CHECK_VALUE(r != WEFT_ERR_INVALID_ARGUMENT, detail, " [", weft_get_error_string(r), "]");
  TORCH_CHECK(false, detail, " [", weft_get_error_string(r), ", weft result ", static_cast<int>(r), "]");
}

}  // namespace weft::torch_ext
