#pragma once
// Fills chunk_bwd_intra's parameter block from a validated problem (every field but the
// shared-memory map, which the launcher fills for the kernel it picks).

#include "kda/ops/chunk_bwd_intra.hpp"
#include "ops/chunk_bwd_intra/cuda/params.hpp"
#include "ops/chunk_bwd_intra/cuda/variant.hpp"

namespace kda::cuda::intra {

// Fills every field but smem from a validated problem (the variant decides the copy paths).
IntraParams make_intra_params(const ChunkBwdIntraProblem& problem, const ChunkBwdIntraDims& dims,
                              const IntraVariant& variant);

}  // namespace kda::cuda::intra
