#pragma once
// Backend entry points of chunk_bwd_intra (SPEC-chunk-bwd-intra.md). Each receives a problem that
// validate() accepted and the dims it derived: inputs are read through their strides, outputs are
// contiguous row-major and overlap nothing. With cu_seqlens on the host, dims.NT is the true chunk
// count; with cu_seqlens on the device and no chunk_indices, the CUDA backend takes dims.NT as an
// upper bound and resolves (and skips) work units on the device.

#include "kda/backend.hpp"
#include "kda/ops/chunk_bwd_intra.hpp"
#include "kda/status.hpp"

namespace kda::detail {

// float64, plain loops that read like the SPEC's steps 1..8: the judge of every other backend.
Status run_chunk_bwd_intra_cpu_ref(const ChunkBwdIntraProblem& problem,
                                   const ChunkBwdIntraDims& dims);
// float32, threaded over (chunk, value head) units.
Status run_chunk_bwd_intra_cpu(const ChunkBwdIntraProblem& problem, const ChunkBwdIntraDims& dims);

#if KDA_WITH_CUDA
// One launch on `stream` (a cudaStream_t); no allocation, no synchronization. `kernel` is the
// caller's choice (auto: the environment's KDA_CUDA_KERNEL, else the default).
Status run_chunk_bwd_intra_cuda(const ChunkBwdIntraProblem& problem, const ChunkBwdIntraDims& dims,
                                Kernel kernel, void* stream);
#endif

}  // namespace kda::detail
