/* weft: fused computation-collective operations on GPUs. The only public C header.
 *
 * Conventions (NCCL-shaped):
 * - Every call returns weft_result_t. WEFT_ERR_INVALID_ARGUMENT means nothing happened and the
 *   communicator is still usable; weft_get_last_error() then names the bad argument.
 * - Ops are stream-ordered and return once enqueued; streams are void* (cudaStream_t,
 *   hipStream_t). On the CPU backend there are no streams: pass NULL and the call returns when the
 *   op is complete.
 * - Collective calls (init, mem_alloc/free, finalize and every op) must be made by every rank of the
 *   communicator in the same order. Ranks that call the same op with a different op, dtype, count
 *   or shape, or a different output block, fail it on every rank with WEFT_ERR_INVALID_USAGE (the
 *   message names both ranks and what differs; counts, shapes and blocks are compared as 12-bit
 *   hashes) before any peer's data is used or any output written; on a GPU stream the failure is
 *   asynchronous (weft_comm_get_async_error) and sticky. Setting `check_signatures` 0 (every
 *   rank alike) turns the comparison off.
 * - Outputs that peers write into (AllReduce result, All-to-All receive buffer) must come from
 *   weft_mem_alloc (the symmetric heap); inputs may be anywhere in this process's memory.
 * - Thread safety: ops, weft_comm_abort, weft_comm_get_async_error and the queries may be called
 *   from any thread; the collective host calls (mem_alloc/free, finalize, destroy) must not race
 *   with other calls on the same communicator.
 */
#ifndef WEFT_WEFT_H
#define WEFT_WEFT_H

#include <stddef.h>
#include <stdint.h>

#include "weft/version.h"

#if defined(__GNUC__)
#define WEFT_API __attribute__((visibility("default")))
#else
#define WEFT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes; the values are fixed. */
typedef enum {
  WEFT_SUCCESS = 0,
  WEFT_ERR_INVALID_ARGUMENT = 1, /* a bad argument; nothing happened, the communicator is usable */
  WEFT_ERR_INVALID_USAGE = 2,    /* a call out of place: destroyed communicator, ranks that disagree */
  WEFT_ERR_NOT_SUPPORTED = 3,    /* not available in this build or on this system */
  WEFT_ERR_OUT_OF_MEMORY = 4,    /* host, device or symmetric-heap memory exhausted */
  WEFT_ERR_SYSTEM = 5,           /* an operating-system or driver call failed */
  WEFT_ERR_TRANSPORT = 6,        /* a network or peer connection failed */
  WEFT_ERR_TIMEOUT = 7,          /* a bounded wait expired (a peer never came); see weft_get_last_error */
  WEFT_ERR_ABORTED = 8,          /* weft_comm_abort was called */
  WEFT_ERR_INTERNAL = 9          /* a bug in weft; please report it with the message */
} weft_result_t;

/* Element types. Reductions accumulate in float32. */
typedef enum { WEFT_FLOAT32 = 0, WEFT_FLOAT16 = 1, WEFT_BFLOAT16 = 2 } weft_dtype_t;

typedef struct weft_comm* weft_comm_t;

#define WEFT_UNIQUE_ID_BYTES 128
/* Names one communicator's bootstrap (rank 0's address and a random secret). Created by one rank
 * with weft_get_unique_id and passed to every rank by the caller (MPI_Bcast, torch.distributed). */
typedef struct {
  char internal[WEFT_UNIQUE_ID_BYTES];
} weft_unique_id_t;

/* Versioned configuration. Initialise with WEFT_CONFIG_INITIALIZER and set only the fields you
 * need; a field left at its initial value takes the WEFT_* environment variable, then the config
 * file, then the default (see `weftctl info -c`). */
typedef struct {
  size_t size;           /* sizeof(weft_config_t), set by the initializer */
  unsigned int magic;    /* set by the initializer */
  unsigned int version;  /* WEFT_VERSION_CODE of the header the caller compiled against */
  double timeout_s;      /* bound of every wait on a peer, seconds (WEFT_TIMEOUT_S); <= 0: unset */
  int persistent_ctas;   /* engine workers: CPU threads, or the GPU thread blocks of the persistent
                            kernel and of most launched ops (the name predates launched ops;
                            README's settings table says which ops take more); <= 0: unset */
  int queue_depth;       /* slots of the work queue; <= 0: unset */
  size_t heap_bytes;     /* symmetric heap per rank, bytes; 0: unset */
  size_t tile_bytes;     /* bytes per tile; 0: unset */
  const char* transport; /* "auto", "p2p" or "proxy"; NULL: unset */
} weft_config_t;

#define WEFT_CONFIG_MAGIC 0x77656674u
/* Every field, in order: size, magic, version, then each setting unset (timeout_s, persistent_ctas,
 * queue_depth, heap_bytes, tile_bytes, transport). */
#define WEFT_CONFIG_INITIALIZER                                                                                       \
  {                                                                                                                   \
    sizeof(weft_config_t) /* size */, WEFT_CONFIG_MAGIC /* magic */, WEFT_VERSION_CODE /* version */,                 \
        -1.0 /* timeout_s */, -1 /* persistent_ctas */, -1 /* queue_depth */, 0 /* heap_bytes */, 0 /* tile_bytes */, \
        NULL /* transport */                                                                                          \
  }

/* Library version as WEFT_VERSION_CODE: major * 10000 + minor * 100 + patch. */
WEFT_API weft_result_t weft_get_version(int* version);

/* A static, human-readable name for a result code. */
WEFT_API const char* weft_get_error_string(weft_result_t result);

/* The detailed message of the calling thread's last failed call ("" if none). `comm` may be NULL.
 * The string stays valid until the thread's next weft call. */
WEFT_API const char* weft_get_last_error(weft_comm_t comm);

/* Creates a new id and starts listening for the ranks in this process (call it on the rank that
 * will be rank 0). The address advertised is WEFT_BOOTSTRAP_ADDR, else the first address of
 * WEFT_BOOTSTRAP_IFNAME, else the first non-loopback IPv4 interface. A process keeps listening
 * for its 64 newest ids not yet used by a rank 0; an older id's socket is closed, and its rank 0
 * binds the same port again at init (failing if another socket took it meanwhile). */
WEFT_API weft_result_t weft_get_unique_id(weft_unique_id_t* id);

/* Collective: joins `nranks` ranks into a communicator. Bounded by bootstrap_timeout_s. A rank
 * whose nranks disagrees with rank 0's makes every rank fail with WEFT_ERR_INVALID_USAGE.
 * `config` may be NULL (defaults). */
WEFT_API weft_result_t weft_comm_init_rank(weft_comm_t* comm, int nranks, weft_unique_id_t id, int rank,
                                           const weft_config_t* config);

/* Collective: as weft_comm_init_rank, with rank, size and rank 0's address taken from the
 * launcher's environment (torchrun/weftrun, Open MPI, PMI, Slurm; see README). */
WEFT_API weft_result_t weft_comm_init_env(weft_comm_t* comm, const weft_config_t* config);

/* Collective: waits for the ops in flight, then for every rank to get here. Call before destroy
 * for a clean shutdown. */
WEFT_API weft_result_t weft_comm_finalize(weft_comm_t comm);

/* Local: stops the engine and frees every resource. The handle is invalid afterwards; using it
 * returns WEFT_ERR_INVALID_USAGE. */
WEFT_API weft_result_t weft_comm_destroy(weft_comm_t comm);

/* Safe from any thread: every op in flight returns WEFT_ERR_ABORTED within a second, and later ops
 * fail at once. The communicator must still be destroyed. Peers are not told; they time out. */
WEFT_API weft_result_t weft_comm_abort(weft_comm_t comm);

/* WEFT_SUCCESS, or the communicator's first asynchronous failure (WEFT_ERR_TIMEOUT,
 * WEFT_ERR_ABORTED) in *async_error; weft_get_last_error then describes it (op, peer, signal). */
WEFT_API weft_result_t weft_comm_get_async_error(weft_comm_t comm, weft_result_t* async_error);

WEFT_API weft_result_t weft_comm_rank(weft_comm_t comm, int* rank);
WEFT_API weft_result_t weft_comm_size(weft_comm_t comm, int* size);

/* Collective: a block of `bytes` (> 0) at the same offset of every rank's symmetric heap; every rank
 * must ask for the same size (else WEFT_ERR_INVALID_USAGE on every rank, naming both sizes). On a
 * GPU the block is device memory, except in a communicator with a peer reached through the host
 * proxy (another node, or transport=proxy): there the heap is pinned host memory mapped into the
 * device, which kernels read and write in place over PCIe (copy with cudaMemcpyDefault). */
WEFT_API weft_result_t weft_mem_alloc(weft_comm_t comm, size_t bytes, void** ptr);
/* Collective: frees a block from weft_mem_alloc; every rank frees the same blocks in the same order. */
WEFT_API weft_result_t weft_mem_free(weft_comm_t comm, void* ptr);

/* Sum AllReduce of `count` elements. recvbuf must be in the symmetric heap, the same block on
 * every rank; sendbuf == recvbuf (in place) is allowed, any other overlap is not. With count 0 the
 * buffers are not touched (and may be NULL), but the call is still collective: a rank that passes
 * 0 where another passes a count fails with WEFT_ERR_INVALID_USAGE, as any ranks that disagree. */
WEFT_API weft_result_t weft_allreduce(weft_comm_t comm, const void* sendbuf, void* recvbuf, int64_t count,
                                      weft_dtype_t dtype, void* stream);

/* All-to-All: block j (count_per_rank elements) of sendbuf goes to rank j; block i of recvbuf
 * (symmetric heap, the same block on every rank, nranks * count_per_rank elements) comes from
 * rank i. Not in place. With
 * count_per_rank 0 the buffers are not touched (and may be NULL), but the call is still collective. */
WEFT_API weft_result_t weft_alltoall(weft_comm_t comm, const void* sendbuf, void* recvbuf, int64_t count_per_rank,
                                     weft_dtype_t dtype, void* stream);

/* Fused row-parallel linear layer (tensor-parallel decode): y[b, j] = sum over ranks r of
 * sum_k x_r[b, k] * w_r[j, k]. x: [batch, k_local] and w: [n, k_local] (torch.nn.Linear layout),
 * row-major, on the device; y: [batch, n] in the symmetric heap, the full sum on every rank when
 * the stream gets past the op. batch is 1..64; n and k_local may be 0 (y is then zeros, or
 * nothing). Accumulation is float32; every rank ends with identical bits. x and w must not
 * overlap y. How it runs (one fused kernel, or a GEMV followed by an AllReduce of y) is chosen per
 * GPU model, world size and shape, the same on every rank; the README's "Retuning for your
 * machine" says how to see and change the choice. */
WEFT_API weft_result_t weft_gemv_allreduce(weft_comm_t comm, const void* x, const void* w, void* y, int64_t batch,
                                           int64_t n, int64_t k_local, weft_dtype_t dtype, void* stream);

/* How weft_embedding_alltoall pools a bag's rows. */
typedef enum { WEFT_POOL_SUM = 0, WEFT_POOL_MEAN = 1 } weft_pool_mode_t;

/* Fused embedding-bag + All-to-All (DLRM model-parallel forward). This rank owns `num_tables`
 * tables of `dim` columns (4..1024, a multiple of 4) stacked in `weights` ([rows, dim], dtype);
 * table t is rows table_offsets[t] .. table_offsets[t + 1] (int64, num_tables + 1 entries, device).
 * Bags are CSR over (table, sample) of the GLOBAL batch (global_batch = nranks * local_batch): bag
 * (t, s) is indices[offsets[t * global_batch + s] .. offsets[t * global_batch + s + 1]) (int64,
 * device; offsets non-decreasing, num_tables * global_batch + 1 entries; indices may be NULL only
 * when every bag is empty); per_sample_weights
 * (float32, alongside indices, device) may be NULL. mode: WEFT_POOL_SUM or WEFT_POOL_MEAN; an empty
 * bag gives zeros.
 * Accumulation is float32. recv (symmetric heap): [local_batch, total_tables, dim]; this rank's
 * tables land in columns [table_base, table_base + num_tables), sample s on rank s / local_batch at
 * row s % local_batch. local_batch, total_tables and dim must be the same on every rank, and the
 * ranks' column ranges must tile [0, total_tables) (otherwise the op times out). No input may
 * overlap recv on any rank (peers store into it while inputs are read; not checked, since the
 * table sizes are in device memory).
 * Indices are checked on the device against their table unless `check_indices` is 0: an index out
 * of range is never read, and the op then fails on every rank with WEFT_ERR_INVALID_ARGUMENT
 * (asynchronously: weft_comm_get_async_error, naming the table and index) after all data moved;
 * the communicator must then be destroyed, as after any device-side failure. */
WEFT_API weft_result_t weft_embedding_alltoall(weft_comm_t comm, const void* weights, const int64_t* table_offsets,
                                               int64_t num_tables, const int64_t* indices, const int64_t* offsets,
                                               const void* per_sample_weights, weft_pool_mode_t mode, void* recv,
                                               int64_t local_batch, int64_t total_tables, int64_t table_base,
                                               int64_t dim, weft_dtype_t dtype, void* stream);

/* Fused GEMM + All-to-All (Mixture-of-Experts output back to the token owners): out = a @ w with
 * a: [tokens, k] and w: [k, h] (row-major, device, bfloat16 or float16; float32 accumulation).
 * The rows of `a` are grouped by destination: the first send_counts[0] rows go to rank 0, the
 * next send_counts[1] to rank 1, and so on. send_counts (int64 [nranks], device memory, as a
 * router leaves it) is exchanged on the device: no host synchronisation. recv (symmetric heap,
 * recv_capacity rows of h) receives on rank j the blocks of every source in source order, as
 * torch's all_to_all_single with output splits lays them out; rows past the received total are
 * not touched. Every rank passes the same weft_mem_alloc block as recv (peers address it by its
 * offset), also a rank that receives nothing; recv_capacity may differ between ranks.
 * recv_counts (int64 [nranks], device) gets the rows from each source, or may be NULL.
 * k and h are multiples of 8, and a and w start on 16 bytes (as cudaMalloc, weft_mem_alloc and
 * torch allocate); any size may be 0 (the call is still collective).
 * Checked on the device, before anything is stored anywhere: send_counts are non-negative and sum
 * to `tokens`, every rank's recv is the same block, and no rank receives more rows than its
 * recv_capacity. If any rank's check fails, the op fails on every rank with
 * WEFT_ERR_INVALID_ARGUMENT (asynchronously: weft_comm_get_async_error names the rank and what was
 * wrong); no recv and no recv_counts is written, and the communicator must then be destroyed, as
 * after any device-side failure. No input may overlap recv. On a GPU this op always runs as its
 * own kernel on `stream`, also under the persistent engine (it is ordered after the ops submitted
 * before it). */
WEFT_API weft_result_t weft_gemm_alltoall(weft_comm_t comm, const void* a, const void* w, const int64_t* send_counts,
                                          void* recv, int64_t recv_capacity, int64_t* recv_counts, int64_t tokens,
                                          int64_t k, int64_t h, weft_dtype_t dtype, void* stream);

/* As weft_gemm_alltoall with several local experts in one call (a grouped GEMM): w is
 * [num_experts, k, h], and rows [expert_offsets[e - 1], expert_offsets[e]) of `a` (from 0 for
 * e = 0) use expert e's weights. expert_offsets (int64 [num_experts], device) is cumulative, as
 * torch._grouped_mm's `offs`: non-decreasing, ending at `tokens` (checked on the device like
 * send_counts). Expert groups and destination blocks are independent partitions of the rows.
 * A sibling call rather than an argument of weft_gemm_alltoall, so that the plain call keeps its
 * shape; num_experts 1 with expert_offsets NULL is that call. */
WEFT_API weft_result_t weft_grouped_gemm_alltoall(weft_comm_t comm, const void* a, const void* w, int64_t num_experts,
                                                  const int64_t* expert_offsets, const int64_t* send_counts, void* recv,
                                                  int64_t recv_capacity, int64_t* recv_counts, int64_t tokens,
                                                  int64_t k, int64_t h, weft_dtype_t dtype, void* stream);

/* Kernels written outside weft (Triton through the weft.triton Python package, or CUDA/HIP C++)
 * may address peers' copies of symmetric blocks directly and wait the way weft's own waits do.
 * weft_comm_get_device_view gives them the addresses; this is the protocol they follow.
 *
 * weft_device_status_t is a view of the communicator's status words, in host memory mapped into
 * the device (on the CPU backend, shared memory). A kernel's
 * wait on a peer reads `stop`, `abort` and `error` (plain or relaxed loads: they order no data) at
 * least every few thousand polls and gives up when any is nonzero, or when timeout_ns has passed.
 * A wait that gives up on its own (a timeout) or a kernel that finds bad input records it once:
 * a compare-and-swap of `error` from 0 to the status (WEFT_DEVICE_STATUS_*); only the winner fills
 * `record` and then stores record_valid = 1 with release order. (weft's host threads record their
 * own failures elsewhere and then store `error`: it may be nonzero while record_valid is 0.)
 * weft_comm_get_async_error then reports the failure (WEFT_ERR_TIMEOUT or
 * WEFT_ERR_INVALID_ARGUMENT) in weft's words, every later op of the communicator fails, and it must
 * be destroyed, as after any device-side failure. */
#define WEFT_DEVICE_STATUS_TIMEOUT 1u   /* a bounded wait expired */
#define WEFT_DEVICE_STATUS_BAD_INPUT 4u /* the kernel found invalid input on the device */
#define WEFT_DEVICE_WAIT_EXTERNAL 17u   /* record.what of a kernel outside weft's engine */
#define WEFT_DEVICE_TICKET_EXTERNAL UINT64_MAX

typedef struct {
  uint32_t stop;         /* read only: nonzero once the communicator is being destroyed */
  uint32_t abort;        /* read only: nonzero after weft_comm_abort */
  uint32_t error;        /* the first failure's WEFT_DEVICE_STATUS_* (0: none); claimed by CAS */
  uint32_t record_valid; /* the claimer's release store of 1, after `record` */
  struct {
    uint64_t ticket;   /* WEFT_DEVICE_TICKET_EXTERNAL */
    uint32_t item;     /* timeout: the waiting program (block); bad input: the kernel's own code */
    int32_t peer;      /* the rank waited on, or the rank whose input was bad */
    uint32_t what;     /* WEFT_DEVICE_WAIT_EXTERNAL */
    uint32_t status;   /* the same value as `error` */
    uint64_t expected; /* timeout: the value waited for (at least); bad input: the limit */
    uint64_t observed; /* timeout: the value last seen; bad input: the value found */
  } record;
} weft_device_status_t;

/* What weft_comm_get_device_view fills. Addresses stay valid until weft_comm_destroy. */
typedef struct {
  size_t size;                       /* in: sizeof(weft_device_view_t) */
  int rank;                          /* this rank */
  int nranks;                        /* ranks of the communicator */
  void* const* peer_bases;           /* host memory, [nranks]: where this process maps rank r's heap; rank r's
                                        copy of a block p (weft_mem_alloc) is peer_bases[r] + (p - peer_bases[rank]),
                                        a device address on GPU backends (CUDA/HIP IPC), a host one on the CPU backend */
  uint64_t heap_bytes;               /* bytes of every rank's heap from its base; blocks lie inside */
  uint64_t timeout_ns;               /* the bound of every wait on a peer (timeout_s) */
  weft_device_status_t* status;      /* the status words (see above) where kernels address them */
  weft_device_status_t* status_host; /* the same words where the host addresses them (usually equal) */
} weft_device_view_t;

/* Local, from any thread: the view above, for kernels written outside weft. Fails with
 * WEFT_ERR_NOT_SUPPORTED, naming the rank, where a peer is reached through the host proxy
 * (another node, or transport=proxy): such a peer's heap is not mapped into this process, so only
 * weft's own ops reach it. WEFT_ERR_INVALID_ARGUMENT if view is NULL or view->size is not
 * sizeof(weft_device_view_t). Writing into a peer's copy outside a protocol the peer follows (a
 * signal it waits on) is the caller's race, as with any shared memory. */
WEFT_API weft_result_t weft_comm_get_device_view(weft_comm_t comm, weft_device_view_t* view);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_WEFT_H */
