#pragma once
// Host launcher of the float32 (3xTF32) tensor-core kernel, explicitly instantiated in generated
// files, one per (BT, V) holding both state layouts (src/ops/chunk_bwd_wy_dqkg/CMakeLists.txt).
// Users reach it as the sm80_mma kernel: launch_sm80_mma dispatches float32 X here.

#include <cuda_runtime.h>

#include "kda/status.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/params.hpp"

namespace kda::cuda {

// X, beta, h and dh float32; kBT: 16, 32 or 64; kV: 64 or 128. `params.K` must be 64 or 128 and
// the strides must satisfy sm80_mma_supports. `device` must be current. Queues one launch on
// `stream`; returns a cuda_error status if the attribute setup or the launch fails.
template <int kBT, int kV, bool kStateVFirst>
Status launch_wy_dqkg_tf32x3(const WyDqkgParams& params, int device, cudaStream_t stream);

}  // namespace kda::cuda
