/* A program from outside the tree, built against an installed weft alone (tests/install/check.sh):
 * the header's version is the library's, and a one-rank communicator runs an AllReduce. */
#include <stdio.h>
#include <string.h>

#include <weft/weft.h>

#define CHECK(call)                                                                                          \
  do {                                                                                                       \
    weft_result_t r_ = (call);                                                                               \
    if (r_ != WEFT_SUCCESS) {                                                                                \
      fprintf(stderr, "outside: %s: %s: %s\n", #call, weft_get_error_string(r_), weft_get_last_error(NULL)); \
      return 1;                                                                                              \
    }                                                                                                        \
  } while (0)

int main(void) {
  int version = 0;
  CHECK(weft_get_version(&version));
  if (version != WEFT_VERSION_CODE) {
    fprintf(stderr, "outside: libweft is version %d, its header %d\n", version, WEFT_VERSION_CODE);
    return 1;
  }

  weft_unique_id_t id;
  weft_config_t config = WEFT_CONFIG_INITIALIZER;
  config.timeout_s = 20;
  config.heap_bytes = 8 << 20;
  weft_comm_t comm;
  CHECK(weft_get_unique_id(&id));
  CHECK(weft_comm_init_rank(&comm, 1, id, 0, &config));
  int rank = -1, size = -1;
  CHECK(weft_comm_rank(comm, &rank));
  CHECK(weft_comm_size(comm, &size));
  enum { kCount = 1000 };
  float x[kCount];
  float* y;
  CHECK(weft_mem_alloc(comm, sizeof(x), (void**)&y));
  for (int i = 0; i < kCount; ++i) x[i] = (float)(i % 17) - 8.0f;
  memset(y, 0xff, sizeof(x)); /* NaN: an op that wrote nothing is caught */
  CHECK(weft_allreduce(comm, x, y, kCount, WEFT_FLOAT32, NULL));
  int wrong = 0;
  for (int i = 0; i < kCount; ++i) wrong += y[i] != x[i];
  CHECK(weft_mem_free(comm, y));
  CHECK(weft_comm_finalize(comm));
  CHECK(weft_comm_destroy(comm));
  if (rank != 0 || size != 1 || wrong) {
    fprintf(stderr, "outside: rank %d of %d, %d of %d sums wrong\n", rank, size, wrong, kCount);
    return 1;
  }
  printf("outside: weft %s (%s), rank 0 of 1, allreduce of %d floats ok\n", WEFT_VERSION_STRING, WEFT_BUILD_GPU,
         kCount);
  return 0;
}
