#pragma once
// chunk_bwd_intra's compile-time traits (X, chunk size, product split, copy path, diagonal) and
// the view of one shared-memory stage. kernel.cuh says how the pieces fit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "ops/chunk_bwd_intra/cuda/params.hpp"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/device.cuh"

namespace kda::cuda::intra {

template <typename XT_, int kBT_, int kSplit_, int kBulkStages_, bool kDiagTc_ = false>
struct IntraTraits {
  using XT = XT_;
  static constexpr int kBT = kBT_;
  static constexpr int kSplit = kSplit_;  // 1: TF32 products, 3: 3xTF32 (float32-level)
  // 0: tiles by cp.async, the stage count at run time; 1 or 2: tiles by bulk tensor copies
  // (IntraParams::tma_copies) into that many stages, the incoming dq/dk/dg prefetched to L2 by
  // bulk requests. Compile-time choices, so that each kernel holds one copy path: run-time flags
  // kept every path's registers live, and ncu showed ~7% of the stall samples on
  // reloads of the values spilled for them at every item.
  static constexpr int kBulkStages = kBulkStages_;
  static constexpr bool kBulk = kBulkStages > 0;
  // The diagonal 16 x 16 blocks on the tensor cores too (diag_block_tc), factored through anchor
  // rows with exponents of both signs: only for gates bounded as safe_gate promises
  // (IntraParams::diag_tc). Otherwise the 8 x 8 triangles are exact on the CUDA cores.
  static constexpr bool kDiagTc = kDiagTc_;
  static_assert(!kDiagTc || (kSplit == 1 && kBulk), "tensor-core diagonal: TF32, bulk copies");
  static_assert(kBulkStages >= 0 && kBulkStages <= 2, "0 (cp.async), 1 or 2 bulk-copy stages");
  static_assert(kBT == 16 || kBT == 32 || kBT == 64, "chunk size must be 16, 32 or 64");
  static_assert(kSplit == 1 || kSplit == 3, "kSplit is 1 or 3");
  static constexpr int kNC = kBT / 16;                                           // sub-chunks
  static constexpr int kGroupsPerPass = IntraSmemLayout::kMaxPassChannels / 32;  // 4
  static constexpr int kWarps = kNC * kGroupsPerPass;  // one task each at K = 128
  static constexpr int kThreads = 32 * kWarps;         // 512, 256, 128
  static constexpr int kMinBlocks = 4 / kNC;           // -> at most 128 registers per thread
  static constexpr int kMaxGroups = 8;                 // K <= 256
  static constexpr int kScratchFloats = 16 * 32;       // per warp
  // The stage's map: compile-time offsets and pitches (the host's IntraSmemLayout::stage).
  static constexpr IntraStageMap kMap = intra_stage_map(kBT, static_cast<int>(sizeof(XT)));
  static constexpr int kLdG = kMap.ld_g;
  static constexpr int kLdX = kMap.ld_x;

  // dA's packed shared-memory layout (params.hpp).
  __host__ __device__ static constexpr int a_ld(int s) { return intra_a_ld(s); }
  __host__ __device__ static constexpr int a_offset(int s) { return intra_a_offset(s); }
  static constexpr int kAFloats = a_offset(kNC);
  // Bytes one item's bulk tensor copies deliver (whole boxes, zero-filled parts included).
  static constexpr uint32_t kTmaBytes = [] {
    int bytes = kBT * (kLdG * 4 + 2 * kLdX * static_cast<int>(sizeof(XT)));
    for (int s = 0; s < kNC; ++s) bytes += 2 * 16 * intra_a_ld(s) * 4;
    return static_cast<uint32_t>(bytes);
  }();
  // The thread that issues the bulk copies: lane 0 of the last warp (whose task, the last
  // sub-chunk, has no column part: the lightest phase 1).
  static constexpr int kIssuer = kThreads - 32;
  static_assert(kMap.g_off % 128 == 0 && kMap.q_off % 128 == 0 && kMap.k_off % 128 == 0 &&
                    kMap.aq_off % 128 == 0 && kMap.ak_off % 128 == 0 && kMap.bytes % 128 == 0,
                "bulk tensor copies need 128-byte aligned tiles");
};

// One stage's tiles (shared memory), as the compute reads them. Rows >= L and columns past the
// pass's channels are zero. Every offset and pitch is a compile-time constant (Tr::kMap).
template <typename Tr>
struct Stage {
  using XT = typename Tr::XT;
  const unsigned char* base;

  __device__ __forceinline__ const float* G() const {
    return reinterpret_cast<const float*>(base + Tr::kMap.g_off);
  }
  __device__ __forceinline__ const float* Aq() const {
    return reinterpret_cast<const float*>(base + Tr::kMap.aq_off);
  }
  __device__ __forceinline__ const float* Ak() const {
    return reinterpret_cast<const float*>(base + Tr::kMap.ak_off);
  }
  __device__ __forceinline__ float beta(int row) const {
    return reinterpret_cast<const float*>(base + Tr::kMap.beta_off)[row];
  }
  __device__ __forceinline__ float g(int row, int col) const { return G()[row * Tr::kLdG + col]; }
  __device__ __forceinline__ float2 g2(int row, int col) const {
    return *reinterpret_cast<const float2*>(G() + row * Tr::kLdG + col);
  }
  __device__ __forceinline__ float q(int row, int col) const {
    return to_float(reinterpret_cast<const XT*>(base + Tr::kMap.q_off)[row * Tr::kLdX + col]);
  }
  __device__ __forceinline__ float k(int row, int col) const {
    return to_float(reinterpret_cast<const XT*>(base + Tr::kMap.k_off)[row * Tr::kLdX + col]);
  }
  // Row i of dA (columns from 0).
  __device__ __forceinline__ const float* aq_row(int i) const {
    return Aq() + Tr::a_offset(i / 16) + (i % 16) * Tr::a_ld(i / 16);
  }
  __device__ __forceinline__ const float* ak_row(int i) const {
    return Ak() + Tr::a_offset(i / 16) + (i % 16) * Tr::a_ld(i / 16);
  }
};

}  // namespace kda::cuda::intra
