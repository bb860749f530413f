#pragma once
// chunk_bwd_wy_dqkg's backends behind kda::run(). Each receives a validated problem and its dims.

#include "kda/backend.hpp"
#include "kda/ops/chunk_bwd_wy_dqkg.hpp"
#include "kda/status.hpp"

namespace kda::detail {

using WyProblem = ChunkBwdWyDqkgProblem;
using WyDims = ChunkBwdWyDqkgDims;

Status run_chunk_bwd_wy_dqkg_cpu_ref(const WyProblem& problem, const WyDims& dims);
Status run_chunk_bwd_wy_dqkg_cpu(const WyProblem& problem, const WyDims& dims);
#if KDA_WITH_CUDA
Status run_chunk_bwd_wy_dqkg_cuda(const WyProblem& problem, const WyDims& dims, Kernel kernel,
                                  void* stream);
#endif

}  // namespace kda::detail
