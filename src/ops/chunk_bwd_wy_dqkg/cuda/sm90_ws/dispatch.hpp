#pragma once
// Whether a problem runs on the sm90_ws kernel (v3), and its launch. Experimental: taken only
// when the environment variable KDA_WY_V3 is 1 (unset or 0: never; any other value is an error),
// for problems it supports; otherwise the sm80_mma kernel runs.

#include <cuda_runtime.h>

#include "kda/ops/chunk_bwd_wy_dqkg.hpp"
#include "kda/status.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/params.hpp"

namespace kda::detail {

// Reads KDA_WY_V3 into *enabled.
Status wy_v3_requested(bool* enabled);

// Launches the sm90_ws kernel when the problem has its shape (16-bit X, BT = 64, K = V = 128,
// h [K][V] in float32 or X) and sets *launched; else leaves *launched false and launches nothing.
// A problem of that shape with a tensor no bulk-copy map can describe is an error (unsupported).
Status try_launch_sm90_ws(const ChunkBwdWyDqkgProblem& p, const ChunkBwdWyDqkgDims& d,
                          const cuda::WyDqkgParams& params, int device, cudaStream_t stream,
                          bool* launched);

}  // namespace kda::detail
