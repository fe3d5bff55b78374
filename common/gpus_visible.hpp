// How many NVIDIA GPUs a process started from here will see, found without CUDA: the /dev/nvidiaN
// device files, narrowed by CUDA_VISIBLE_DEVICES as CUDA reads it. For processes that must not
// start CUDA themselves (weftrun; a test's parent before it forks its ranks).
#pragma once

namespace weft {

int nvidiaGpusVisible();

}  // namespace weft
