#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bench.hpp"

namespace weft::bench {

void die(const std::string& what) {
  std::fprintf(stderr, "weft-bench: %s\n", what.c_str());
  std::exit(1);
}

namespace {

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}
void weftOk(weft_result_t r, const char* what) {
  if (r != WEFT_SUCCESS) die(std::string(what) + ": " + weft_get_error_string(r) + ": " + weft_get_last_error(nullptr));
}
void ncclOk(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) die(std::string(what) + ": " + ncclGetErrorString(r));
}

// Rank 0's `n` bytes to every rank, through weft itself: the bytes as floats, summed with
// everyone's zeros.
void shareFromRank0(Context& c, char* data, size_t n, const char* what) {
  std::vector<float> bytes(n, 0.f);
  if (c.rank == 0)
    for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(data[i]);
  cuda(cudaMemcpy(c.weftRecv, bytes.data(), n * 4, cudaMemcpyDefault), what);
  weftOk(weft_allreduce(c.weft, c.weftRecv, c.weftRecv, n, WEFT_FLOAT32, c.stream), what);
  cuda(cudaStreamSynchronize(c.stream), what);
  cuda(cudaMemcpy(bytes.data(), c.weftRecv, n * 4, cudaMemcpyDefault), what);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>(static_cast<int>(bytes[i]));
}

ncclUniqueId shareNcclId(Context& c) {
  ncclUniqueId id{};
  if (c.rank == 0) ncclOk(ncclGetUniqueId(&id), "ncclGetUniqueId");
  shareFromRank0(c, id.internal, sizeof id.internal, "share the NCCL id");
  return id;
}

}  // namespace

Context setUp(const Options& o) {
  Context c;
  const char* local = std::getenv("LOCAL_RANK");
  int devices = 0;
  cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  cuda(cudaSetDevice((local ? std::atoi(local) : 0) % devices), "cudaSetDevice");
  weft_config_t config = WEFT_CONFIG_INITIALIZER;
  // With --baseline weft the baseline's receive buffer is a second heap block of the same size.
  const uint64_t blocks = o.baseline == "weft" ? 2 : 1;
  config.heap_bytes = blocks * o.maxBytes + (64u << 20);
  weftOk(weft_comm_init_env(&c.weft, &config), "weft_comm_init_env");
  weftOk(weft_comm_rank(c.weft, &c.rank), "rank");
  weftOk(weft_comm_size(c.weft, &c.nranks), "size");
  cuda(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), "stream");
  const size_t bytes = std::max<uint64_t>(o.maxBytes, 4096);
  weftOk(weft_mem_alloc(c.weft, bytes, &c.weftRecv), "weft_mem_alloc");
  cuda(cudaMalloc(&c.send, bytes), "cudaMalloc send");
  cuda(cudaMalloc(&c.ncclRecv, bytes), "cudaMalloc recv");
  if (o.baseline == "nccl") {
    const ncclUniqueId id = shareNcclId(c);
    ncclOk(ncclCommInitRank(&c.nccl, c.nranks, id, c.rank), "ncclCommInitRank");
  }
  return c;
}

namespace {

// Sets an environment variable for a communicator's init (settings without a weft_config_t field
// come from the environment) and puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

Solo::Solo(size_t bytes) {
  weft_unique_id_t id;
  weftOk(weft_get_unique_id(&id), "weft_get_unique_id (one-rank communicator)");
  weft_config_t config = WEFT_CONFIG_INITIALIZER;
  config.heap_bytes = bytes + (16u << 20);
  // weft's own GEMV, whatever the path table would run on one rank.
  const ScopedEnv path("WEFT_GEMV_PATH", "unfused");
  weftOk(weft_comm_init_rank(&comm, 1, id, 0, &config), "weft_comm_init_rank (one-rank communicator)");
  weftOk(weft_mem_alloc(comm, bytes, &heap), "weft_mem_alloc (one-rank communicator)");
}

Solo::~Solo() {
  weft_mem_free(comm, heap);
  weft_comm_destroy(comm);
}

Peers::Peers(Context& c, const char* setting, const char* path, size_t bytes) {
  weft_unique_id_t id{};
  if (c.rank == 0) weftOk(weft_get_unique_id(&id), "weft_get_unique_id (second communicator)");
  shareFromRank0(c, id.internal, sizeof id.internal, "share the second communicator's id");
  weft_config_t config = WEFT_CONFIG_INITIALIZER;
  config.heap_bytes = bytes + (16u << 20);
  {
    const ScopedEnv forced(setting, path);
    weftOk(weft_comm_init_rank(&comm, c.nranks, id, c.rank, &config), "weft_comm_init_rank (second communicator)");
  }
  weftOk(weft_mem_alloc(comm, bytes, &heap), "weft_mem_alloc (second communicator)");
}

Peers::~Peers() {
  weft_mem_free(comm, heap);
  weft_comm_destroy(comm);
}

void tearDown(Context& c) {
  cudaStreamSynchronize(c.stream);
  if (c.nccl) ncclCommDestroy(c.nccl);
  weft_mem_free(c.weft, c.weftRecv);
  weftOk(weft_comm_finalize(c.weft), "weft_comm_finalize");
  weft_comm_destroy(c.weft);
  cudaFree(c.send);
  cudaFree(c.ncclRecv);
  cudaStreamDestroy(c.stream);
}

}  // namespace weft::bench
