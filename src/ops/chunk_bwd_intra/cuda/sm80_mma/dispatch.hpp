#pragma once
// chunk_bwd_intra's sm80_mma kernel (TF32 mma.sync for 16-bit X, 3xTF32 for float32 X): the
// dispatch of a validated problem's runtime options (X, split, BT) to one compiled kernel.

#include <cuda_runtime.h>

#include "kda/ops/chunk_bwd_intra.hpp"
#include "kda/status.hpp"
#include "ops/chunk_bwd_intra/cuda/variant.hpp"

namespace kda::detail {

// Fills the parameter block and launches on `stream`; `device` (the tensors') must already be
// current. Returns a cuda_error status on failure.
Status launch_sm80_mma(const ChunkBwdIntraProblem& problem, const ChunkBwdIntraDims& dims,
                       const cuda::intra::IntraVariant& variant, int device, cudaStream_t stream);

}  // namespace kda::detail
