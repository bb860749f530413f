#pragma once
// chunk_bwd_wy_dqkg's sm80_mma kernel (mma.sync: 16-bit products for float16/bfloat16 X, 3xTF32
// products for float32 X): which validated problems it takes, and the dispatch of a problem's
// runtime options to one compiled kernel.

#include <cuda_runtime.h>

#include <string>

#include "kda/ops/chunk_bwd_wy_dqkg.hpp"
#include "kda/status.hpp"

namespace kda::detail {

// True when the kernel handles this validated problem: X float16, bfloat16 or float32; h, dh
// float32 or X; K and V 64 or 128; every input's last dimension contiguous and its data pointer and
// other strides 16-byte aligned (strides of extent-1 dimensions are not looked at); output pointers
// 16-byte aligned; a chunk's offsets of g, q, k, the outputs and a head's h, dh within 32 bits.
// Otherwise false, with the first reason in *why_not when given.
bool sm80_mma_supports(const ChunkBwdWyDqkgProblem& p, const ChunkBwdWyDqkgDims& d,
                       std::string* why_not = nullptr);

// Launches on `stream`; the tensors' device must already be current. `split_ranks` as
// WyCudaTuning's (backends.hpp): 0 the size rule, else 1, 2 or 4. Returns a cuda_error status on
// failure, internal if sm80_mma_supports(p, d) is false.
Status launch_sm80_mma(const ChunkBwdWyDqkgProblem& p, const ChunkBwdWyDqkgDims& d,
                       cudaStream_t stream, int split_ranks);

}  // namespace kda::detail
