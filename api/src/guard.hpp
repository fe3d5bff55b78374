// The C boundary: one guard turns every exception into a result code and keeps its message for
// weft_get_last_error; communicator handles are ids looked up in a registry, so a destroyed or
// forged handle is an error instead of a use-after-free.
#pragma once

#include <memory>
#include <string>

#include "common/error.hpp"
#include "runtime/comm.hpp"
#include "weft/weft.h"

namespace weft::api {

void setLastError(const std::string& message);
void clearLastError();
const char* lastError();

// Registers a communicator and returns its handle.
weft_comm_t registerComm(std::unique_ptr<Comm> c);
// The live communicator behind a handle; throws kInvalidArgument (NULL) or kInvalidUsage.
std::shared_ptr<Comm> lookupComm(weft_comm_t handle);
// Removes the handle; the communicator dies when its last in-flight call returns.
std::shared_ptr<Comm> unregisterComm(weft_comm_t handle);

template <typename F>
weft_result_t guarded(const char* fn, F&& body) {
  clearLastError();
  try {
    return static_cast<weft_result_t>(body());
  } catch (const Error& e) {
    setLastError(std::string(fn) + ": " + e.what());
    return static_cast<weft_result_t>(e.code());
  } catch (const std::bad_alloc&) {
    setLastError(std::string(fn) + ": out of host memory");
    return WEFT_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    setLastError(std::string(fn) + ": internal error: " + e.what());
    return WEFT_ERR_INTERNAL;
  } catch (...) {
    setLastError(std::string(fn) + ": internal error: unknown exception");
    return WEFT_ERR_INTERNAL;
  }
}

// Argument checks; each throws kInvalidArgument naming the argument.
void requirePtr(const void* p, const char* name);
dev::DType requireDtype(int dtype, const char* name);
// count >= 0 and count * elemBytes * multiplier fits in int64.
uint64_t requireCount(int64_t count, const char* name, uint64_t elemBytes, uint64_t multiplier);

}  // namespace weft::api
