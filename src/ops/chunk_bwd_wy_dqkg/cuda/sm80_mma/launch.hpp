#pragma once
// Host launchers of the sm80_mma kernel, explicitly instantiated in generated files per
// (X dtype, h dtype): every (BT, V, state_v_first), and the split-unit form per V.

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

// K rows of h per pipeline stage of the split-unit kernel (its slab pairs): a unit's split divides
// K / kSplitSlabK stages among the CTAs of its cluster (wy_split_ranks picks how many; the launcher
// checks the traits agree).
inline constexpr int kSplitSlabK = 32;

// The same kernel with split units (BT = 64, h stored [K][V]): clusters of `ranks` CTAs (2, or 4
// with K = 128), each cluster one unit (traits.cuh, kSplitUnits). For problems with fewer units
// than SMs; wy_split_ranks (dispatch.cu) picks `ranks`.
template <typename XT, typename HT, int kV>
Status launch_wy_dqkg_mma_split(const WyDqkgParams& params, int ranks, int device,
                                cudaStream_t stream);

}  // namespace kda::cuda
