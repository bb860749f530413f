#pragma once
// Fills the kernels' parameter block from a validated problem; shared by the general kernel and
// the tensor-core path.

#include "kda/ops/chunk_bwd_wy_dqkg.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/params.hpp"

namespace kda::cuda {

WyDqkgParams make_wy_dqkg_params(const ChunkBwdWyDqkgProblem& problem,
                                 const ChunkBwdWyDqkgDims& dims);

}  // namespace kda::cuda
