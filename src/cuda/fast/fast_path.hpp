#pragma once
// The CUDA backend's tensor-core path (mma.sync, 16-bit X): which validated problems it takes and
// how to launch it. The dispatcher (cuda_backend.cu) asks fast_path_supports first and falls
// back on the general SIMT kernel when it says no.

#include <cuda_runtime.h>

#include "kda/problem.hpp"
#include "kda/status.hpp"

namespace kda::detail {

// True when the mma kernel handles this validated problem: X float16 or bfloat16; h, dh float32
// or X; K and V 64 or 128; every input's last dimension contiguous and its data pointer and other
// strides 16-byte aligned (strides of extent-1 dimensions are not looked at); output pointers
// 16-byte aligned. Anything else runs on the general path.
bool fast_path_supports(const Problem& p, const Dims& d);

// Launches on `stream`; the tensors' device must already be current. Returns a cuda_error status
// on failure, internal if fast_path_supports(p, d) is false.
Status launch_fast_path(const Problem& p, const Dims& d, cudaStream_t stream);

}  // namespace kda::detail
