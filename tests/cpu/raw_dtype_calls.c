/* Calls with a dtype that is not a weft_dtype_t enumerator, as a C caller can make them. Also
 * proves weft.h compiles as C. */
#include "weft/weft.h"

weft_result_t allreduceWithRawDtype(weft_comm_t comm, const void* s, void* r, int64_t count, int dtype) {
  return weft_allreduce(comm, s, r, count, (weft_dtype_t)dtype, 0);
}

weft_result_t alltoallWithRawDtype(weft_comm_t comm, const void* s, void* r, int64_t count, int dtype) {
  return weft_alltoall(comm, s, r, count, (weft_dtype_t)dtype, 0);
}
