// How many NVIDIA GPUs a process started from here will see, found without CUDA: the /dev/nvidiaN
// device files, narrowed by CUDA_VISIBLE_DEVICES as CUDA reads it. For processes that must not
// start CUDA themselves (weftrun; a test's parent before it forks its ranks).
#pragma once

namespace weft {

int nvidiaGpusVisible();

// The most of `nranks` ranks placed round-robin on `gpus` GPUs that share one (1 without GPUs).
int ranksPerGpu(int nranks, int gpus);
// The CUDA_MPS_ACTIVE_THREAD_PERCENTAGE that gives each of `nranks` ranks placed round-robin on
// `gpus` GPUs its share of the SMs (100 / the most ranks on one GPU), or 0 where no GPU is shared
// (or there is none): ranks that share a GPU run their spinning kernels side by side only under
// MPS with a share each (weftrun, weftctl tune measure).
int mpsSharePercent(int nranks, int gpus);

}  // namespace weft
