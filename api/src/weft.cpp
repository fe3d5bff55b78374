// The exported C functions: argument checks, then the runtime. Nothing here runs without a guard.
#include <cstddef>
#include <cstring>
#include <map>
#include <utility>

#include "common/log.hpp"
#include "device/dtype_device.hpp"
#include "device/ops/embedding/embedding_args.hpp"
#include "device/ops/gemm/gemm_args.hpp"
#include "device/ops/gemv/gemv_args.hpp"
#include "device/queue_device.hpp"
#include "guard.hpp"
#include "runtime/launch_env.hpp"
#include "runtime/unique_id.hpp"

using weft::Code;
using weft::Error;
namespace api = weft::api;

namespace {

// Config fields the caller set, as text for the settings table.
std::map<std::string, std::string> configOverrides(const weft_config_t* c) {
  std::map<std::string, std::string> out;
  if (!c) return out;
  if (c->magic != WEFT_CONFIG_MAGIC || c->size < offsetof(weft_config_t, transport) + sizeof(c->transport))
    throw Error(Code::kInvalidArgument, "config: not initialised with WEFT_CONFIG_INITIALIZER");
  if (c->timeout_s > 0) out["timeout_s"] = std::to_string(c->timeout_s);
  if (c->persistent_ctas > 0) out["persistent_ctas"] = std::to_string(c->persistent_ctas);
  if (c->queue_depth > 0) out["queue_depth"] = std::to_string(c->queue_depth);
  if (c->heap_bytes > 0) out["heap_bytes"] = std::to_string(c->heap_bytes);
  if (c->tile_bytes > 0) out["tile_bytes"] = std::to_string(c->tile_bytes);
  if (c->transport) out["transport"] = c->transport;
  return out;
}

// A C caller may pass any int as a weft_dtype_t; reading it through the enum type would be
// undefined in C++, so the checks read its bytes.
int rawDtype(const weft_dtype_t* d) {
  int v;
  static_assert(sizeof v == sizeof *d);
  std::memcpy(&v, d, sizeof v);
  return v;
}

Code initComm(weft_comm_t* comm, const weft::UniqueId& id, int rank, int nranks, const weft_config_t* config) {
  weft::Settings s = weft::Settings::resolve(configOverrides(config));
  weft::log::configure(s.getString("log_level"), s.getString("log_subsys"), s.getString("log_file"));
  *comm = api::registerComm(weft::Comm::create(id, rank, nranks, s));
  return Code::kSuccess;
}

}  // namespace

extern "C" {

weft_result_t weft_get_version(int* version) {
  return api::guarded(__func__, [&] {
    api::requirePtr(version, "version");
    *version = WEFT_VERSION_CODE;
    return Code::kSuccess;
  });
}

const char* weft_get_error_string(weft_result_t r) {
  switch (r) {
    case WEFT_SUCCESS:
      return "success";
    case WEFT_ERR_INVALID_ARGUMENT:
      return "invalid argument";
    case WEFT_ERR_INVALID_USAGE:
      return "invalid usage";
    case WEFT_ERR_NOT_SUPPORTED:
      return "not supported";
    case WEFT_ERR_OUT_OF_MEMORY:
      return "out of memory";
    case WEFT_ERR_SYSTEM:
      return "system error";
    case WEFT_ERR_TRANSPORT:
      return "transport error";
    case WEFT_ERR_TIMEOUT:
      return "timeout";
    case WEFT_ERR_ABORTED:
      return "aborted";
    case WEFT_ERR_INTERNAL:
      return "internal error";
  }
  return "unknown result code";
}

const char* weft_get_last_error(weft_comm_t) { return api::lastError(); }

weft_result_t weft_get_unique_id(weft_unique_id_t* id) {
  return api::guarded(__func__, [&] {
    api::requirePtr(id, "id");
    weft::Settings s = weft::Settings::resolve();
    weft::UniqueId u = weft::createUniqueId(s.getString("bootstrap_addr"), s.getString("bootstrap_ifname"));
    static_assert(sizeof id->internal == weft::kUniqueIdBytes);
    u.encode(reinterpret_cast<uint8_t*>(id->internal));
    return Code::kSuccess;
  });
}

weft_result_t weft_comm_init_rank(weft_comm_t* comm, int nranks, weft_unique_id_t id, int rank,
                                  const weft_config_t* config) {
  return api::guarded(__func__, [&] {
    api::requirePtr(comm, "comm");
    *comm = nullptr;
    if (nranks < 1) throw Error(Code::kInvalidArgument, "nranks: " + std::to_string(nranks) + " is below 1");
    if (rank < 0 || rank >= nranks)
      throw Error(Code::kInvalidArgument,
                  "rank: " + std::to_string(rank) + " is outside [0, " + std::to_string(nranks) + ")");
    const auto u = weft::UniqueId::decode(reinterpret_cast<const uint8_t*>(id.internal), "id");
    return initComm(comm, u, rank, nranks, config);
  });
}

weft_result_t weft_comm_init_env(weft_comm_t* comm, const weft_config_t* config) {
  return api::guarded(__func__, [&] {
    api::requirePtr(comm, "comm");
    *comm = nullptr;
    const weft::LaunchInfo l = weft::launchFromEnv([](const char* n) { return std::getenv(n); });
    return initComm(comm, l.id, l.rank, l.nranks, config);
  });
}

weft_result_t weft_comm_finalize(weft_comm_t comm) {
  return api::guarded(__func__, [&] {
    api::lookupComm(comm)->finalize();
    return Code::kSuccess;
  });
}

weft_result_t weft_comm_destroy(weft_comm_t comm) {
  return api::guarded(__func__, [&] {
    api::unregisterComm(comm);
    return Code::kSuccess;
  });
}

weft_result_t weft_comm_abort(weft_comm_t comm) {
  return api::guarded(__func__, [&] {
    api::lookupComm(comm)->abort();
    return Code::kSuccess;
  });
}

weft_result_t weft_comm_get_async_error(weft_comm_t comm, weft_result_t* async_error) {
  return api::guarded(__func__, [&] {
    auto c = api::lookupComm(comm);
    api::requirePtr(async_error, "async_error");
    std::string msg;
    *async_error = static_cast<weft_result_t>(c->asyncError(&msg));
    if (*async_error != WEFT_SUCCESS) api::setLastError(msg);
    return Code::kSuccess;
  });
}

// weft_device_status_t is the tail of the queue header, field for field.
static_assert(sizeof(weft_device_status_t) == offsetof(weft::dev::QueueHeader, record) + sizeof(weft::dev::WaitRecord) -
                                                  offsetof(weft::dev::QueueHeader, stop));
static_assert(offsetof(weft::dev::QueueHeader, abort) - offsetof(weft::dev::QueueHeader, stop) ==
              offsetof(weft_device_status_t, abort));
static_assert(offsetof(weft::dev::QueueHeader, error) - offsetof(weft::dev::QueueHeader, stop) ==
              offsetof(weft_device_status_t, error));
static_assert(offsetof(weft::dev::QueueHeader, recordValid) - offsetof(weft::dev::QueueHeader, stop) ==
              offsetof(weft_device_status_t, record_valid));
static_assert(offsetof(weft::dev::QueueHeader, record) - offsetof(weft::dev::QueueHeader, stop) ==
              offsetof(weft_device_status_t, record));
static_assert(sizeof(weft::dev::WaitRecord) == sizeof(weft_device_status_t::record));
static_assert(offsetof(weft::dev::WaitRecord, observed) == offsetof(decltype(weft_device_status_t::record), observed));
static_assert(WEFT_DEVICE_STATUS_TIMEOUT == static_cast<uint32_t>(weft::dev::Status::kTimeout));
static_assert(WEFT_DEVICE_STATUS_BAD_INPUT == static_cast<uint32_t>(weft::dev::Status::kBadInput));
static_assert(WEFT_DEVICE_WAIT_EXTERNAL == static_cast<uint32_t>(weft::dev::WaitWhat::kExternal));
static_assert(WEFT_DEVICE_TICKET_EXTERNAL == weft::dev::kExternalTicket);

weft_result_t weft_comm_get_device_view(weft_comm_t comm, weft_device_view_t* view) {
  return api::guarded(__func__, [&] {
    auto c = api::lookupComm(comm);
    api::requirePtr(view, "view");
    if (view->size != sizeof(weft_device_view_t))
      throw Error(Code::kInvalidArgument, "view: size is " + std::to_string(view->size) +
                                              ", not sizeof(weft_device_view_t) (" +
                                              std::to_string(sizeof(weft_device_view_t)) + ")");
    const weft::ExternalView x = c->externalView();
    view->rank = c->rank();
    view->nranks = c->nranks();
    view->peer_bases = x.bases->data();
    view->heap_bytes = x.heapBytes;
    view->timeout_ns = x.timeoutNs;
    view->status = static_cast<weft_device_status_t*>(x.statusOnDevice);
    view->status_host = reinterpret_cast<weft_device_status_t*>(&x.status->stop);
    return Code::kSuccess;
  });
}

weft_result_t weft_comm_rank(weft_comm_t comm, int* rank) {
  return api::guarded(__func__, [&] {
    auto c = api::lookupComm(comm);
    api::requirePtr(rank, "rank");
    *rank = c->rank();
    return Code::kSuccess;
  });
}

weft_result_t weft_comm_size(weft_comm_t comm, int* size) {
  return api::guarded(__func__, [&] {
    auto c = api::lookupComm(comm);
    api::requirePtr(size, "size");
    *size = c->nranks();
    return Code::kSuccess;
  });
}

weft_result_t weft_mem_alloc(weft_comm_t comm, size_t bytes, void** ptr) {
  return api::guarded(__func__, [&] {
    auto c = api::lookupComm(comm);
    api::requirePtr(ptr, "ptr");
    *ptr = nullptr;
    if (bytes == 0) throw Error(Code::kInvalidArgument, "bytes: 0; a block must have at least one byte");
    *ptr = c->memAlloc(bytes);
    return Code::kSuccess;
  });
}

weft_result_t weft_mem_free(weft_comm_t comm, void* ptr) {
  return api::guarded(__func__, [&] {
    auto c = api::lookupComm(comm);
    api::requirePtr(ptr, "ptr");
    c->memFree(ptr);
    return Code::kSuccess;
  });
}

weft_result_t weft_allreduce(weft_comm_t comm, const void* sendbuf, void* recvbuf, int64_t count, weft_dtype_t dtype,
                             void* stream) {
  return api::guarded(__func__, [&] {
    auto c = api::lookupComm(comm);
    const auto dt = api::requireDtype(rawDtype(&dtype), "dtype");
    const uint64_t n = api::requireCount(count, "count", weft::dev::dtypeSize(dt), 1);
    if (n > 0) api::requirePtr(sendbuf, "sendbuf");
    if (n > 0) api::requirePtr(recvbuf, "recvbuf");
    return c->allReduce(sendbuf, recvbuf, n, dt, stream);
  });
}

weft_result_t weft_alltoall(weft_comm_t comm, const void* sendbuf, void* recvbuf, int64_t count_per_rank,
                            weft_dtype_t dtype, void* stream) {
  return api::guarded(__func__, [&] {
    auto c = api::lookupComm(comm);
    const auto dt = api::requireDtype(rawDtype(&dtype), "dtype");
    const uint64_t n = api::requireCount(count_per_rank, "count_per_rank", weft::dev::dtypeSize(dt),
                                         static_cast<uint64_t>(c->nranks()));
    if (n > 0) api::requirePtr(sendbuf, "sendbuf");
    if (n > 0) api::requirePtr(recvbuf, "recvbuf");
    return c->allToAll(sendbuf, recvbuf, n, dt, stream);
  });
}

weft_result_t weft_gemv_allreduce(weft_comm_t comm, const void* x, const void* w, void* y, int64_t batch, int64_t n,
                                  int64_t k_local, weft_dtype_t dtype, void* stream) {
  return api::guarded(__func__, [&] {
    auto c = api::lookupComm(comm);
    const auto dt = api::requireDtype(rawDtype(&dtype), "dtype");
    if (batch < 1 || batch > weft::dev::kGemvMaxBatch)
      throw weft::Error(weft::Code::kInvalidArgument, "batch: " + std::to_string(batch) + " is not in 1.." +
                                                          std::to_string(weft::dev::kGemvMaxBatch));
    const uint64_t rows = api::requireCount(n, "n", weft::dev::dtypeSize(dt), static_cast<uint64_t>(batch));
    const uint64_t k = api::requireCount(k_local, "k_local", weft::dev::dtypeSize(dt), static_cast<uint64_t>(batch));
    if (rows > 0 && k > 0 && k > static_cast<uint64_t>(INT64_MAX) / (rows * weft::dev::dtypeSize(dt)))
      throw weft::Error(weft::Code::kInvalidArgument, "k_local: n * k_local elements overflow the byte size");
    if (k > 0) api::requirePtr(x, "x");
    if (rows > 0 && k > 0) api::requirePtr(w, "w");
    if (rows > 0) api::requirePtr(y, "y");
    return c->gemvAllReduce(x, w, y, static_cast<uint32_t>(batch), rows, k, dt, stream);
  });
}

weft_result_t weft_embedding_alltoall(weft_comm_t comm, const void* weights, const int64_t* table_offsets,
                                      int64_t num_tables, const int64_t* indices, const int64_t* offsets,
                                      const void* per_sample_weights, weft_pool_mode_t mode, void* recv,
                                      int64_t local_batch, int64_t total_tables, int64_t table_base, int64_t dim,
                                      weft_dtype_t dtype, void* stream) {
  return api::guarded(__func__, [&] {
    using weft::Code;
    using weft::Error;
    auto c = api::lookupComm(comm);
    const auto dt = api::requireDtype(rawDtype(&dtype), "dtype");
    if (dim < 4 || dim > 1024 || dim % 4 != 0)
      throw Error(Code::kInvalidArgument, "dim: " + std::to_string(dim) + " is not a multiple of 4 in 4..1024");
    const int rawMode = static_cast<int>(mode);  // any int a C caller passed
    if (rawMode != WEFT_POOL_SUM && rawMode != WEFT_POOL_MEAN)
      throw Error(Code::kInvalidArgument,
                  "mode: " + std::to_string(rawMode) + " is neither WEFT_POOL_SUM (0) nor WEFT_POOL_MEAN (1)");
    const uint64_t row = static_cast<uint64_t>(dim) * weft::dev::dtypeSize(dt);
    const uint64_t tables = api::requireCount(total_tables, "total_tables", row, 1);
    const uint64_t batch = api::requireCount(local_batch, "local_batch", row, tables ? tables : 1);
    const uint64_t owned = api::requireCount(num_tables, "num_tables", 1, 1);
    const uint64_t base = api::requireCount(table_base, "table_base", 1, 1);
    if (base > tables || owned > tables - base)
      throw Error(Code::kInvalidArgument, "table_base: columns " + std::to_string(base) + ".." +
                                              std::to_string(base + owned) + " run past total_tables (" +
                                              std::to_string(tables) + ")");
    if (batch > static_cast<uint64_t>(INT64_MAX) / static_cast<uint64_t>(c->nranks()) / (owned ? owned : 1))
      throw Error(Code::kInvalidArgument, "local_batch: the bag count overflows");
    if (owned > 0) {
      api::requirePtr(weights, "weights");
      api::requirePtr(table_offsets, "table_offsets");
      if (batch > 0) api::requirePtr(offsets, "offsets");
    }
    if (batch > 0 && tables > 0) api::requirePtr(recv, "recv");
    weft::dev::EmbeddingArgs a{static_cast<const uint8_t*>(weights),
                               table_offsets,
                               indices,
                               offsets,
                               static_cast<const float*>(per_sample_weights),
                               owned,
                               batch,
                               tables,
                               base,
                               static_cast<uint64_t>(dim),
                               rawMode == WEFT_POOL_MEAN,
                               true};
    return c->embeddingAllToAll(a, recv, dt, stream);
  });
}

// Both GEMM entry points; `fn`, the one called, names the errors.
static weft_result_t gemmAllToAll(const char* fn, weft_comm_t comm, const void* a, const void* w, int64_t num_experts,
                                  const int64_t* expert_offsets, const int64_t* send_counts, void* recv,
                                  int64_t recv_capacity, int64_t* recv_counts, int64_t tokens, int64_t k, int64_t h,
                                  weft_dtype_t dtype, void* stream) {
  return api::guarded(fn, [&] {
    using weft::Code;
    using weft::Error;
    auto c = api::lookupComm(comm);
    const auto dt = api::requireDtype(rawDtype(&dtype), "dtype");
    if (dt == weft::dev::DType::kFloat32)
      throw Error(Code::kInvalidArgument, "dtype: the GEMM runs on tensor cores and takes bfloat16 or float16");
    const uint64_t es = weft::dev::dtypeSize(dt);
    if (k % 8 != 0) throw Error(Code::kInvalidArgument, "k: " + std::to_string(k) + " is not a multiple of 8");
    if (h % 8 != 0) throw Error(Code::kInvalidArgument, "h: " + std::to_string(h) + " is not a multiple of 8");
    const uint64_t cols = api::requireCount(h, "h", es, 1);
    const uint64_t depth = api::requireCount(k, "k", es, cols ? cols : 1);
    const uint64_t rows = api::requireCount(tokens, "tokens", es, depth ? depth : 1);
    const uint64_t capacity = api::requireCount(recv_capacity, "recv_capacity", es, cols ? cols : 1);
    if (num_experts < 1)
      throw Error(Code::kInvalidArgument, "num_experts: " + std::to_string(num_experts) + " is not at least 1");
    const uint64_t experts = api::requireCount(num_experts, "num_experts", es, std::max<uint64_t>(depth * cols, 1));
    // Work items are counted in 32 bits.
    if (weft::dev::gemmItems(rows, cols) > 0xffffffffull)
      throw Error(Code::kInvalidArgument, "tokens: " + std::to_string(tokens) + " rows of " + std::to_string(h) +
                                              " columns are more than one op can count; split the call");
    api::requirePtr(send_counts, "send_counts");
    if (experts > 1) api::requirePtr(expert_offsets, "expert_offsets");
    if (rows > 0 && depth > 0) api::requirePtr(a, "a");
    if (depth > 0 && cols > 0) api::requirePtr(w, "w");
    for (const auto& [p, name] : {std::pair{a, "a"}, std::pair{w, "w"}})
      if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
        throw Error(Code::kInvalidArgument, std::string(name) + ": does not start on 16 bytes");
    if (cols > 0) api::requirePtr(recv, "recv");
    weft::dev::GemmArgs g{static_cast<const uint8_t*>(a),
                          static_cast<const uint8_t*>(w),
                          send_counts,
                          recv_counts,
                          experts > 1 ? expert_offsets : nullptr,
                          rows,
                          depth,
                          cols,
                          capacity,
                          experts};
    return c->gemmAllToAll(g, recv, dt, stream);
  });
}

weft_result_t weft_grouped_gemm_alltoall(weft_comm_t comm, const void* a, const void* w, int64_t num_experts,
                                         const int64_t* expert_offsets, const int64_t* send_counts, void* recv,
                                         int64_t recv_capacity, int64_t* recv_counts, int64_t tokens, int64_t k,
                                         int64_t h, weft_dtype_t dtype, void* stream) {
  return gemmAllToAll(__func__, comm, a, w, num_experts, expert_offsets, send_counts, recv, recv_capacity, recv_counts,
                      tokens, k, h, dtype, stream);
}

weft_result_t weft_gemm_alltoall(weft_comm_t comm, const void* a, const void* w, const int64_t* send_counts, void* recv,
                                 int64_t recv_capacity, int64_t* recv_counts, int64_t tokens, int64_t k, int64_t h,
                                 weft_dtype_t dtype, void* stream) {
  return gemmAllToAll(__func__, comm, a, w, 1, nullptr, send_counts, recv, recv_capacity, recv_counts, tokens, k, h,
                      dtype, stream);
}

}  // extern "C"
