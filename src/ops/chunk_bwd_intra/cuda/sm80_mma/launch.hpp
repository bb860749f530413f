#pragma once
// Host launcher of the chunk_bwd_intra kernel: one explicit instantiation per (X, BT, split) in the
// intra_sm80_mma_*.cu files.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kda/status.hpp"
#include "ops/chunk_bwd_intra/cuda/params.hpp"
#include "ops/chunk_bwd_intra/cuda/variant.hpp"

namespace kda::cuda::intra {

// XT: float, __half or __nv_bfloat16; kBT: 16, 32 or 64; kSplit: 1 or 3. `device` must be
// current. Fills params.smem, then queues one launch (a persistent grid) on `stream`.
template <typename XT, int kBT, int kSplit>
Status launch_chunk_bwd_intra(IntraParams params, const IntraVariant& variant, int device,
                              cudaStream_t stream);

// Per (kernel, device, bytes): resident CTAs per SM, queried once (no synchronization) under a
// lock. (The device's SM count and shared-memory limit: device_facts, kernel_attributes.hpp.)
Status resident_ctas(const void* kernel, int device, int threads, int smem_bytes, int* out);

}  // namespace kda::cuda::intra
