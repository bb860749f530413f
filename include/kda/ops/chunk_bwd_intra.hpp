#pragma once
// chunk_bwd_intra: fla's chunk_kda_bwd_intra, the gradients that flow through the intra-chunk
// matrices Aqk and Akk back to q, k, beta and g (contract: SPEC-chunk-bwd-intra.md).

#include <cstdint>
#include <string>

#include "kda/status.hpp"
#include "kda/tensor.hpp"

namespace kda {

// Sizes derived from a valid problem.
struct ChunkBwdIntraDims {
  int64_t B = 0;         // batch rows (1 when varlen)
  int64_t T = 0;         // tokens per batch row
  int64_t H = 0;         // query/key heads
  int64_t HV = 0;        // value heads; HV % H == 0
  int64_t K = 0;         // head dim, 1..256
  int64_t BT = 0;        // chunk size: 16, 32 or 64
  int64_t NT = 0;        // chunks: per batch row (fixed length) or in total (varlen); with
                         // device-resident cu_seqlens and no chunk_indices an upper bound
  int64_t num_seqs = 0;  // sequences (B when fixed length, len(cu_seqlens) - 1 when varlen)
  bool varlen = false;
  DType x_dtype = DType::f32;     // X: q, k
  DType beta_dtype = DType::f32;  // X or f32
};

struct ChunkBwdIntraProblem {
  // Inputs (read only). Shapes as in SPEC-chunk-bwd-intra.md.
  TensorView q;     // [B, T, H, K]   X
  TensorView k;     // [B, T, H, K]   X
  TensorView g;     // [B, T, HV, K]  f32, chunk-local cumulative gate in log2 space
  TensorView beta;  // [B, T, HV]     X or f32
  TensorView dAqk;  // [B, T, HV, BT] f32, lower-inclusive (scale already inside)
  TensorView dAkk;  // [B, T, HV, BT] f32, lower-inclusive (the diagonal is read)
  TensorView dq;    // [B, T, HV, K]  f32, incoming
  TensorView dk;    // [B, T, HV, K]  f32, incoming
  TensorView db;    // [B, T, HV]     f32, incoming
  TensorView dg;    // [B, T, HV, K]  f32, incoming
  // Optional inputs: leave default-constructed to omit.
  TensorView cu_seqlens;     // [N+1] i32/i64; then B == 1
  TensorView chunk_indices;  // [NT, 2] i32/i64 (sequence id, chunk id within sequence)

  // Outputs: incoming + intra-chunk terms (written in full; contiguous, not overlapping anything).
  TensorView dq_out;  // [B, T, HV, K]  f32
  TensorView dk_out;  // [B, T, HV, K]  f32
  TensorView db_out;  // [B, T, HV]     f32
  TensorView dg_out;  // [B, T, HV, K]  f32

  int64_t chunk_size = 64;
  // fla's algorithm switch; changes nothing mathematically (SPEC), so backends may ignore it.
  bool safe_gate = false;

  Status validate(ChunkBwdIntraDims* dims = nullptr) const;
  std::string describe() const;
};

}  // namespace kda
