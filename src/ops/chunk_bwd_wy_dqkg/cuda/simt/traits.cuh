#pragma once
// Compile-time tile shapes and the shared-memory layout of the simt (SIMT fp32) kernel.
//
// One CTA of 256 threads (8 warps) handles one work unit = (chunk, value head). Thread layout for
// every L x 32 tile it computes (L <= BT rows of the chunk, 32 K- or V-columns):
//   lane  = column within the 32-wide tile,
//   warp  = a block of kRows = BT / 8 contiguous rows: rows warp * kRows .. + kRows - 1.
// For the BT x BT matrices (D, X, Y, Z for dA) a thread owns the same rows and the columns
// lane + 32 * jj, jj < kDCols (columns >= BT are skipped: for BT = 16 lanes 16..31 own none).

#include <cstdint>

namespace kda::cuda {

template <int kBT_>
struct WyDqkgTraits {
  static constexpr int kBT = kBT_;
  static_assert(kBT == 16 || kBT == 32 || kBT == 64, "chunk size must be 16, 32 or 64");

  static constexpr int kThreads = 256;
  // CTAs per SM the register budget is set for (65536 / (256 * this) registers per thread:
  // 128 for BT = 64 and 32, 64 for BT = 16; BT = 32 spills at 3 CTAs' 80). Shared memory allows
  // them: about 100, 47 and 27 KB per CTA of 228 KB per SM.
  static constexpr int kMinCtasPerSm = kBT == 16 ? 4 : 2;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kBK = 32;                  // K columns per block: one per lane
  static constexpr int kBV = 32;                  // V columns per tile: one per lane
  static constexpr int kRows = kBT / kWarps;      // rows per thread: 2, 4 or 8
  static constexpr int kDCols = (kBT + 31) / 32;  // L x L columns per thread: 1, 1 or 2
  static_assert(kRows == 2 || kRows % 4 == 0, "rows per thread are read as float2 or float4");

  // Row pitches in floats. A pitch = 4 (mod 32) makes the float4 reads of 8 distinct rows by a
  // quarter-warp (lane j reads row j) hit 8 distinct 4-bank groups: conflict-free. A pitch of 20
  // (BT = 16) also gives 8 distinct groups. Reads of one row by a whole warp are broadcasts.
  static constexpr int kTileLd = kBV + 4;  // 32-wide tiles
  static constexpr int kALd = kBT + 4;     // BT-wide tiles (A, X, Y)
  static_assert(kBK == kBV, "K blocks and V tiles share the 32-wide tile pitch");

  // The shared-memory layout, every region 16-byte aligned for float4 reads. After the K loop
  // the token tiles are dead and Y = X·Āᵀ takes their place (the union); during the epilogue of
  // each K block G, Q and Kk are staged in the dO, Vn and dV tiles.
  struct Shared {
    alignas(16) float A[kBT][kALd];      // Ā[j][i] = A[t0+j, hv, i], zero outside j, i < L
    alignas(16) float D[kBT][kALd];      // D = dV·Vvᵀ + dW·KGᵀ, then X in place
    alignas(16) float beta[kBT];         // β, zero beyond L
    alignas(16) float S[kBK][kTileLd];   // h tile S[k][v] (32 k x 32 v)
    alignas(16) float dS[kBK][kTileLd];  // dh tile
    union alignas(16) {
      struct {
        float dO[kBT][kTileLd];  // do tile (32 v); G in the epilogue
        float Vn[kBT][kTileLd];  // v_new tile;     Q in the epilogue
        float dV[kBT][kTileLd];  // dv tile;        Kk in the epilogue
        float Vv[kBT][kTileLd];  // v tile (first K block only)
      } tok;
      float Y[kBT][kALd];  // X·Āᵀ, after the K loop
    };
    alignas(16) float dW[kBT][kTileLd];  // dW of the current K block (32 k)
    alignas(16) float KG[kBT][kTileLd];  // KG of the current K block
    alignas(16) float part[kWarps][32];  // per-warp Σ_rows Kk⊙dK0 of the current K block
  };
  static constexpr int kSmemBytes = static_cast<int>(sizeof(Shared));

  static_assert((kBT * 32) % kThreads == 0 && (kBK * kBV) % kThreads == 0,
                "tile loads give every thread the same number of elements");
};

}  // namespace kda::cuda
