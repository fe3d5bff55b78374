// torch.ops.weft._*: the communicator's host calls, used by weft.Comm (private: their Python
// wrappers hold the lifetime rules). Registered as ops so that the package needs no Python C
// API and no second binding layer.
#include <torch/library.h>

#include <cstring>
#include <tuple>
#include <vector>

#include "comm_state.hpp"
#include "errors.hpp"

namespace weft::torch_ext {
namespace {

at::Tensor uniqueId() {
  at::Tensor id = at::empty({WEFT_UNIQUE_ID_BYTES}, at::kByte);
  weft_unique_id_t u;
  check(weft_get_unique_id(&u), "weft_get_unique_id");
  std::memcpy(id.data_ptr(), u.internal, sizeof u.internal);
  return id;
}

// Without an id, rank, size and rank 0's address come from the launcher's environment.
int64_t commInit(const c10::optional<at::Tensor>& id, int64_t nranks, int64_t rank, double timeoutS,
                 int64_t heapBytes) {
  weft_config_t config = WEFT_CONFIG_INITIALIZER;
  config.timeout_s = timeoutS;
  config.heap_bytes = heapBytes > 0 ? static_cast<size_t>(heapBytes) : 0;
  weft_comm_t comm = nullptr;
  if (id.has_value()) {
    TORCH_CHECK_VALUE(id->scalar_type() == at::kByte && id->numel() == WEFT_UNIQUE_ID_BYTES && id->is_cpu(),
                      "weft.Comm: unique_id: must be a CPU uint8 tensor of ", WEFT_UNIQUE_ID_BYTES, " bytes");
    weft_unique_id_t u;
    std::memcpy(u.internal, id->contiguous().data_ptr(), sizeof u.internal);
    check(weft_comm_init_rank(&comm, static_cast<int>(nranks), u, static_cast<int>(rank), &config),
          "weft_comm_init_rank");
  } else {
    check(weft_comm_init_env(&comm, &config), "weft_comm_init_env");
  }
  return registerComm(CommState::create(comm));
}

int64_t commRank(int64_t comm) { return lookupComm(comm, "weft.Comm.rank")->rank(); }
int64_t commSize(int64_t comm) { return lookupComm(comm, "weft.Comm.size")->size(); }
std::string commDevice(int64_t comm) { return lookupComm(comm, "weft.Comm.device")->device().str(); }

at::Tensor commEmpty(int64_t comm, c10::IntArrayRef size, c10::ScalarType dtype) {
  return lookupComm(comm, "weft.Comm.empty")->empty(size, dtype);
}

void commFlush(int64_t comm) { lookupComm(comm, "weft.Comm.flush")->flush(); }
void commBarrier(int64_t comm) { lookupComm(comm, "weft.Comm.barrier")->barrier(); }

// [live blocks, of which released on this rank and not yet freed]
std::vector<int64_t> commBlocks(int64_t comm) {
  auto s = lookupComm(comm, "weft.Comm.blocks");
  return {static_cast<int64_t>(s->liveBlocks()), static_cast<int64_t>(s->releasedBlocks())};
}

bool isSymmetric(const at::Tensor& t, int64_t comm) {
  auto s = lookupComm(comm, "weft.Comm.is_symmetric");
  return t.device() == s->device() && t.numel() > 0 && s->inHeap(t.data_ptr(), t.nbytes());
}

// "" while the communicator is healthy, else its first asynchronous failure, as check() words it.
std::string commAsyncError(int64_t comm) {
  weft_result_t failure = WEFT_SUCCESS;
  check(weft_comm_get_async_error(lookupComm(comm, "weft.Comm.async_error")->handle(), &failure),
        "weft_comm_get_async_error");
  if (failure == WEFT_SUCCESS) return "";
  return std::string(weft_get_last_error(nullptr)) + " [" + weft_get_error_string(failure) + ", weft result " +
         std::to_string(static_cast<int>(failure)) + "]";
}

// weft_comm_get_device_view as (peer bases, the status words' device and host addresses, heap
// bytes, timeout ns), for
// kernels written outside weft (weft.triton). Addresses are ints: Python never dereferences them.
std::tuple<std::vector<int64_t>, int64_t, int64_t, int64_t, int64_t> commDeviceView(int64_t comm) {
  weft_device_view_t v{};
  v.size = sizeof v;
  check(weft_comm_get_device_view(lookupComm(comm, "weft.Comm.device_view")->handle(), &v),
        "weft_comm_get_device_view");
  std::vector<int64_t> bases(v.nranks);
  for (int r = 0; r < v.nranks; ++r) bases[r] = static_cast<int64_t>(reinterpret_cast<intptr_t>(v.peer_bases[r]));
  return {bases, static_cast<int64_t>(reinterpret_cast<intptr_t>(v.status)),
          static_cast<int64_t>(reinterpret_cast<intptr_t>(v.status_host)), static_cast<int64_t>(v.heap_bytes),
          static_cast<int64_t>(v.timeout_ns)};
}

// Safe from any thread: ops in flight fail within a second, later ones at once (weft.h).
void commAbort(int64_t comm) {
  check(weft_comm_abort(lookupComm(comm, "weft.Comm.abort")->handle()), "weft_comm_abort");
}

void commDestroy(int64_t comm, bool finalize) {
  auto s = lookupComm(comm, "weft.Comm.destroy");
  unregisterComm(comm);
  s->destroy(finalize);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(weft, m) {
  m.def("_unique_id() -> Tensor", &uniqueId);
  m.def("_comm_init(Tensor? unique_id, int nranks, int rank, float timeout_s, int heap_bytes) -> int", &commInit);
  m.def("_comm_rank(int comm) -> int", &commRank);
  m.def("_comm_size(int comm) -> int", &commSize);
  m.def("_comm_device(int comm) -> str", &commDevice);
  m.def("_comm_empty(int comm, int[] size, ScalarType dtype) -> Tensor", &commEmpty);
  m.def("_comm_flush(int comm) -> ()", &commFlush);
  m.def("_comm_barrier(int comm) -> ()", &commBarrier);
  m.def("_comm_blocks(int comm) -> int[]", &commBlocks);
  m.def("_is_symmetric(Tensor t, int comm) -> bool", &isSymmetric);
  m.def("_comm_async_error(int comm) -> str", &commAsyncError);
  m.def("_comm_device_view(int comm) -> (int[], int, int, int, int)", &commDeviceView);
  m.def("_comm_abort(int comm) -> ()", &commAbort);
  m.def("_comm_destroy(int comm, bool finalize) -> ()", &commDestroy);
}

}  // namespace weft::torch_ext
