#pragma once
// Host launcher of the simt kernel, explicitly instantiated per (X, h dtype, BT) in one generated
// file per (X, h dtype).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kda/status.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/params.hpp"

namespace kda::cuda {

// XT: the X dtype (float, __half, __nv_bfloat16); HT: the h/dh dtype (float or XT); kBT: 16, 32
// or 64. `device` must be current. Queues one launch on `stream`; returns a cuda_error status if
// the attribute setup or the launch fails.
template <typename XT, typename HT, int kBT>
Status launch_wy_dqkg(const WyDqkgParams& params, int device, cudaStream_t stream);

}  // namespace kda::cuda
