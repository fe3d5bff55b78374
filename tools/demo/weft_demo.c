/* The quick-start job: every rank runs a fused GEMV + AllReduce (the row-parallel linear layer of
 * tensor-parallel decoding), an AllReduce and an All-to-All through weft and checks the results
 * against values it computes itself. Start it with `weftrun -n 4 weft-demo` (or torchrun,
 * mpirun, srun). Written in C against weft.h alone, as a framework would use it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft/weft.h"

#define CHECK(call)                                                                                        \
  do {                                                                                                     \
    weft_result_t r_ = (call);                                                                             \
    if (r_ != WEFT_SUCCESS) {                                                                              \
      fprintf(stderr, "%s failed: %s: %s\n", #call, weft_get_error_string(r_), weft_get_last_error(NULL)); \
      exit(1);                                                                                             \
    }                                                                                                      \
  } while (0)

static double nowMs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char** argv) {
  if (argc > 1) {
    /* It takes no arguments: any (--help included) gets the usage, before any communicator. */
    printf("usage: weftrun -n N %s   (or torchrun, mpirun, srun: weft reads the rank and size each sets)\n"
           "Every rank runs a fused GEMV + AllReduce, an AllReduce and an All-to-All and checks the results.\n",
           argv[0]);
    return strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ? 0 : 2;
  }
  weft_comm_t comm;
  int rank, size;
  CHECK(weft_comm_init_env(&comm, NULL));
  CHECK(weft_comm_rank(comm, &rank));
  CHECK(weft_comm_size(comm, &size));

  /* AllReduce: x_r[i] = (r + 1) * (i % 97 + 1) / 2, so the sum is exact in float32. */
  const int64_t n = 1000003;
  float* x = malloc(n * sizeof(float));
  float* y;
  CHECK(weft_mem_alloc(comm, n * sizeof(float), (void**)&y));
  for (int64_t i = 0; i < n; ++i) x[i] = (rank + 1) * (float)(i % 97 + 1) * 0.5f;
  double t0 = nowMs();
  CHECK(weft_allreduce(comm, x, y, n, WEFT_FLOAT32, NULL));
  double tAr = nowMs() - t0;
  int64_t bad = 0;
  const float ranks = size * (size + 1) / 2.0f;
  for (int64_t i = 0; i < n; ++i) bad += y[i] != ranks * (float)(i % 97 + 1) * 0.5f;

  /* All-to-All: element k of the block rank r sends to rank j is r * 1000 + j + k % 7. */
  const int64_t per = 65539;
  float* s = malloc(per * size * sizeof(float));
  float* recv;
  CHECK(weft_mem_alloc(comm, per * size * sizeof(float), (void**)&recv));
  for (int j = 0; j < size; ++j)
    for (int64_t k = 0; k < per; ++k) s[j * per + k] = rank * 1000.0f + j + (float)(k % 7);
  t0 = nowMs();
  CHECK(weft_alltoall(comm, s, recv, per, WEFT_FLOAT32, NULL));
  double tA2a = nowMs() - t0;
  int64_t badA2a = 0;
  for (int i = 0; i < size; ++i)
    for (int64_t k = 0; k < per; ++k) badA2a += recv[i * per + k] != i * 1000.0f + rank + (float)(k % 7);

  /* Fused GEMV + AllReduce: out[b, j] = sum over ranks r of x_r[b, :] . w_r[j, :], with
   * x_r[b][c] = (b + c + r) % 3 - 1 and w_r[j][c] = (j + 2c + r) % 5 - 2: small integers, so every
   * sum is exact in float32 and each rank can compute every other rank's share. */
  const int64_t batch = 4, rows = 2048, kLocal = 256;
  float* gx = malloc(batch * kLocal * sizeof(float));
  float* gw = malloc(rows * kLocal * sizeof(float));
  float* out;
  CHECK(weft_mem_alloc(comm, batch * rows * sizeof(float), (void**)&out));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < kLocal; ++c) gx[b * kLocal + c] = (float)((b + c + rank) % 3 - 1);
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t c = 0; c < kLocal; ++c) gw[j * kLocal + c] = (float)((j + 2 * c + rank) % 5 - 2);
  t0 = nowMs();
  CHECK(weft_gemv_allreduce(comm, gx, gw, out, batch, rows, kLocal, WEFT_FLOAT32, NULL));
  double tGemv = nowMs() - t0;
  int64_t badGemv = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < rows; ++j) {
      long want = 0;
      for (int r = 0; r < size; ++r)
        for (int64_t c = 0; c < kLocal; ++c) want += ((b + c + r) % 3 - 1) * ((j + 2 * c + r) % 5 - 2);
      badGemv += out[b * rows + j] != (float)want;
    }

  printf("rank %d/%d: fused gemv+allreduce of [%lld x %lld] . [%lld x %lld]^T: %s (%lld wrong, %.1f ms)\n", rank, size,
         (long long)batch, (long long)kLocal, (long long)rows, (long long)kLocal, badGemv ? "FAILED" : "ok",
         (long long)badGemv, tGemv);
  printf(
      "rank %d/%d: allreduce of %lld floats: %s (%lld wrong, %.1f ms); alltoall of %lld floats per rank: %s "
      "(%lld wrong, %.1f ms)\n",
      rank, size, (long long)n, bad ? "FAILED" : "ok", (long long)bad, tAr, (long long)per, badA2a ? "FAILED" : "ok",
      (long long)badA2a, tA2a);
  fflush(stdout);

  CHECK(weft_mem_free(comm, out));
  CHECK(weft_mem_free(comm, recv));
  CHECK(weft_mem_free(comm, y));
  CHECK(weft_comm_finalize(comm));
  CHECK(weft_comm_destroy(comm));
  free(gw);
  free(gx);
  free(s);
  free(x);
  return bad || badA2a || badGemv ? 1 : 0;
}
