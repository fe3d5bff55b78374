#include "guard.hpp"

#include <mutex>
#include <unordered_map>

namespace weft::api {

static_assert(WEFT_SUCCESS == static_cast<int>(Code::kSuccess));
static_assert(WEFT_ERR_INVALID_ARGUMENT == static_cast<int>(Code::kInvalidArgument));
static_assert(WEFT_ERR_INVALID_USAGE == static_cast<int>(Code::kInvalidUsage));
static_assert(WEFT_ERR_NOT_SUPPORTED == static_cast<int>(Code::kNotSupported));
static_assert(WEFT_ERR_OUT_OF_MEMORY == static_cast<int>(Code::kOutOfMemory));
static_assert(WEFT_ERR_SYSTEM == static_cast<int>(Code::kSystem));
static_assert(WEFT_ERR_TRANSPORT == static_cast<int>(Code::kTransport));
static_assert(WEFT_ERR_TIMEOUT == static_cast<int>(Code::kTimeout));
static_assert(WEFT_ERR_ABORTED == static_cast<int>(Code::kAborted));
static_assert(WEFT_ERR_INTERNAL == static_cast<int>(Code::kInternal));
static_assert(WEFT_FLOAT32 == static_cast<int>(dev::DType::kFloat32));
static_assert(WEFT_FLOAT16 == static_cast<int>(dev::DType::kFloat16));
static_assert(WEFT_BFLOAT16 == static_cast<int>(dev::DType::kBFloat16));

namespace {

thread_local std::string tLastError;

std::mutex gMutex;
std::unordered_map<uintptr_t, std::shared_ptr<Comm>> gComms;
// Handles are never reused, so a stale handle can never reach a newer communicator.
uintptr_t gNextHandle = 0x1000;

}  // namespace

void setLastError(const std::string& message) { tLastError = message; }
void clearLastError() { tLastError.clear(); }
const char* lastError() { return tLastError.c_str(); }

weft_comm_t registerComm(std::unique_ptr<Comm> c) {
  std::lock_guard<std::mutex> lock(gMutex);
  const uintptr_t h = gNextHandle;
  gNextHandle += 0x10;
  gComms.emplace(h, std::shared_ptr<Comm>(std::move(c)));
  return reinterpret_cast<weft_comm_t>(h);
}

std::shared_ptr<Comm> lookupComm(weft_comm_t handle) {
  if (!handle) throw Error(Code::kInvalidArgument, "comm: NULL");
  std::lock_guard<std::mutex> lock(gMutex);
  auto it = gComms.find(reinterpret_cast<uintptr_t>(handle));
  if (it == gComms.end())
    throw Error(Code::kInvalidUsage, "comm: not a live communicator (destroyed, or never initialised)");
  return it->second;
}

std::shared_ptr<Comm> unregisterComm(weft_comm_t handle) {
  std::shared_ptr<Comm> c = lookupComm(handle);
  std::lock_guard<std::mutex> lock(gMutex);
  gComms.erase(reinterpret_cast<uintptr_t>(handle));
  return c;
}

void requirePtr(const void* p, const char* name) {
  if (!p) throw Error(Code::kInvalidArgument, std::string(name) + ": NULL");
}

dev::DType requireDtype(int dtype, const char* name) {
  if (dtype < 0 || dtype >= static_cast<int>(dev::kNumDTypes))
    throw Error(Code::kInvalidArgument, std::string(name) + ": " + std::to_string(dtype) +
                                            " is not WEFT_FLOAT32, WEFT_FLOAT16 or WEFT_BFLOAT16");
  return static_cast<dev::DType>(dtype);
}

uint64_t requireCount(int64_t count, const char* name, uint64_t elemBytes, uint64_t multiplier) {
  if (count < 0) throw Error(Code::kInvalidArgument, std::string(name) + ": " + std::to_string(count) + " is negative");
  if (static_cast<uint64_t>(count) > static_cast<uint64_t>(INT64_MAX) / (elemBytes * multiplier))
    throw Error(Code::kInvalidArgument,
                std::string(name) + ": " + std::to_string(count) + " elements overflow the byte size");
  return static_cast<uint64_t>(count);
}

}  // namespace weft::api
