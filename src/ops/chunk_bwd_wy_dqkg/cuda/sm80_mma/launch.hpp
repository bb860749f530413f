#pragma once
// Host launcher of the sm80_mma kernel, explicitly instantiated in one generated file per
// (X dtype, h dtype), each holding every (BT, V, state_v_first).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kda/status.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/params.hpp"

namespace kda::cuda {

// XT: __half or __nv_bfloat16; HT: float or XT; kBT: 16, 32 or 64; kV: 64 or 128. `params.K` must
// be a multiple of 16 and the strides must satisfy sm80_mma_supports. `device` must be current.
// Queues one launch on `stream`; returns a cuda_error status if the attribute setup or the
// launch fails.
template <typename XT, typename HT, int kBT, int kV, bool kStateVFirst>
Status launch_wy_dqkg_mma(const WyDqkgParams& params, int device, cudaStream_t stream);

}  // namespace kda::cuda
