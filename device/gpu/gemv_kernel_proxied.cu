// The proxied variant of gemv_kernel.cu's kernels: device code that also posts to the host proxy
// (kernels.hpp says why each kernel comes twice).
#define WEFT_PROXY_IN_DEVICE 1
#include "gemv_kernel.cu"
