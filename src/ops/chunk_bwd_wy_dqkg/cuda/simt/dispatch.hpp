#pragma once
// chunk_bwd_wy_dqkg's simt kernel: takes every validated problem.

#include <cuda_runtime.h>

#include "kda/ops/chunk_bwd_wy_dqkg.hpp"
#include "kda/status.hpp"

namespace kda::detail {

// Launches on `stream`; the tensors' device must already be current.
Status launch_simt(const ChunkBwdWyDqkgProblem& p, const ChunkBwdWyDqkgDims& d,
                   cudaStream_t stream);

}  // namespace kda::detail
