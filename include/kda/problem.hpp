#pragma once
// The problem descriptor: every field of the SPEC signature of chunk_kda_bwd_wy_dqkg_fused,
// plus the output views the caller allocated.

#include <cstdint>
#include <optional>
#include <string>

#include "kda/status.hpp"
#include "kda/tensor.hpp"

namespace kda {

// Sizes derived from a valid problem.
struct Dims {
  int64_t B = 0;         // batch rows (1 when varlen)
  int64_t T = 0;         // tokens per batch row
  int64_t H = 0;         // query/key heads
  int64_t HV = 0;        // value heads; HV % H == 0
  int64_t K = 0;         // key head dim, 1..256
  int64_t V = 0;         // value head dim, 1..256
  int64_t BT = 0;        // chunk size: 16, 32 or 64
  int64_t NT = 0;        // chunks: per batch row (fixed length) or in total (varlen)
  int64_t num_seqs = 0;  // sequences (B when fixed length, len(cu_seqlens) - 1 when varlen)
  bool varlen = false;
  DType x_dtype = DType::f32;     // X: q, k, v, v_new, do, dv, A (and dv_out)
  DType h_dtype = DType::f32;     // h, dh: f32 or X
  DType beta_dtype = DType::f32;  // X or f32
};

struct Problem {
  // Inputs (read only). Shapes as in SPEC.md.
  TensorView q;      // [B, T, H, K]   X
  TensorView k;      // [B, T, H, K]   X
  TensorView v;      // [B, T, HV, V]  X
  TensorView v_new;  // [B, T, HV, V]  X
  TensorView g;      // [B, T, HV, K]  f32, cumulative gate in log2 space
  TensorView beta;   // [B, T, HV]     X or f32
  TensorView A;      // [B, T, HV, BT] X
  TensorView h;      // [B, NT, HV, K, V] ([.., V, K] when state_v_first)  f32 or X
  TensorView do_;    // [B, T, HV, V]  X   (SPEC's `do`, a C++ keyword)
  TensorView dh;     // like h
  TensorView dv;     // [B, T, HV, V]  X   gradient w.r.t. v_new; never written
  // Optional inputs: leave default-constructed to omit.
  TensorView cu_seqlens;     // [N+1] i32/i64; then B == 1
  TensorView chunk_indices;  // [NT, 2] i32/i64 (sequence id, chunk id within sequence)

  // Outputs (written in full; contiguous, not overlapping anything else).
  TensorView dq;      // [B, T, HV, K]  f32
  TensorView dk;      // [B, T, HV, K]  f32
  TensorView dv_out;  // [B, T, HV, V]  X
  TensorView db;      // [B, T, HV]     f32
  TensorView dg;      // [B, T, HV, K]  f32
  TensorView dA;      // [B, T, HV, BT] f32

  std::optional<double> scale;  // nullopt means K ** -0.5
  int64_t chunk_size = 64;
  bool state_v_first = false;

  // Checks every rule of SPEC.md; on failure the message names the argument and what was
  // expected. Index tensors on the host are checked element by element; on a GPU their contents
  // are checked by the kernel (see docs/design.md). Fills *dims when given and valid.
  Status validate(Dims* dims = nullptr) const;
  double effective_scale() const;
  // One line per field, for logs and error reports.
  std::string describe() const;
};

}  // namespace kda
