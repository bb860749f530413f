#pragma once
// Host launcher of the sm90_ws kernel (v3: persistent, warp-specialized; kernel.cuh), explicitly
// instantiated per (X dtype, h dtype) in launch.cu.

#include <cuda_runtime.h>

#include "kda/status.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/params.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm90_ws/maps.hpp"

namespace kda::cuda {

// XT: __half or __nv_bfloat16; HT: float or XT. The problem must have BT = 64, K = V = 128 and h
// stored [K][V], with `maps` encoded for it (dispatch.cu). One CTA per SM (at most one per unit).
template <typename XT, typename HT>
Status launch_wy_dqkg_ws(const WyDqkgParams& params, const WyDqkgMaps& maps, int device,
                         cudaStream_t stream);

}  // namespace kda::cuda
