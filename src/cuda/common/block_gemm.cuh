#pragma once
// A whole block's product of two float32 tiles in shared memory on the TF32 tensor cores:
// C = alpha · A · B (+ C), the 16 x 16 blocks of C taken in turn by the block's warps. The
// building block of kernels whose steps are a chain of small dense products with elementwise
// passes between them (chunk_bwd_epilogue): simple, not the fastest way to feed the tensor cores.

#include "cuda/common/tf32_mma.cuh"

namespace kda::cuda::mma {

// C (kM x kN, row pitch ldc) = alpha · A (kM x kKd) · B (kKd x kN) + (accumulate ? C : 0); A and B
// in the layouts of warp_mma_tf32 (A kMK: (m, k) at A[m * lda + k], kKM: at A[k * lda + m];
// B kNK: (k, n) at B[n * ldb + k], kKN: at B[k * ldb + n]), split by `Split` as they are loaded
// (Tf32Split<1>: one TF32 product; Tf32x3Split: three, float32-level accuracy). kM and kN are
// multiples of 16, kKd of 8. Called by every thread of the block; C must not overlap A or B, and
// the caller synchronizes before (A, B written) and after (C read).
template <ALayout kA, BLayout kB, int kM, int kN, int kKd, typename Split>
__device__ __forceinline__ void block_gemm(float* C, int ldc, const float* A, int lda,
                                           const float* B, int ldb, float alpha, bool accumulate) {
  static_assert(kM % 16 == 0 && kN % 16 == 0 && kKd % 8 == 0, "whole 16 x 16 blocks, k8 steps");
  constexpr int kBlocksN = kN / 16;
  constexpr int kBlocks = (kM / 16) * kBlocksN;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  for (int block = warp; block < kBlocks; block += warps) {
    const int m0 = (block / kBlocksN) * 16;
    const int n0 = (block % kBlocksN) * 16;
    float acc[2][4] = {};
    const float* a = kA == ALayout::kMK ? A + m0 * lda : A + m0;
    const float* b = kB == BLayout::kNK ? B + n0 * ldb : B + n0;
    warp_mma_tf32<kA, kB, kKd / 8, 2, Split>(acc, a, lda, b, ldb, lane);
    const int g = lane / 4;
    const int q = lane % 4;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float& c = C[(m0 + g + (e >= 2 ? 8 : 0)) * ldc + n0 + 8 * nt + 2 * q + (e & 1)];
        c = accumulate ? fmaf(alpha, acc[nt][e], c) : alpha * acc[nt][e];
      }
    }
  }
}

}  // namespace kda::cuda::mma
