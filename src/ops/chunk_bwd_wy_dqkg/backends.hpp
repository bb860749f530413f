#pragma once
// chunk_bwd_wy_dqkg's backends behind kda::run() (declared for every operator in
// core/op_backends.hpp), and the CUDA backend's tuning for tests and measurements.

#include "core/op_backends.hpp"

namespace kda::detail {

using WyProblem = ChunkBwdWyDqkgProblem;
using WyDims = ChunkBwdWyDqkgDims;

#if KDA_WITH_CUDA
// The sm80_mma kernel's split units (a cluster of CTAs per unit, for problems of fewer units than
// SMs): 0 follows the size rule (sm80_mma/dispatch.cu), 1 never splits, 2 or 4 split into the
// largest of 4, 2 not above it that divides the slab pairs. Tests and measurements set it; every
// other caller takes the rule.
struct WyCudaTuning {
  int split_ranks = 0;
};

// The same with tuning other than the default (a split outside 0, 1, 2, 4 is an error).
Status run_chunk_bwd_wy_dqkg_cuda_tuned(const WyProblem& problem, const WyDims& dims, Kernel kernel,
                                        void* stream, const WyCudaTuning& tuning);
#endif

}  // namespace kda::detail
