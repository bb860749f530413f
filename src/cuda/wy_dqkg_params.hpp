#pragma once
// The kernel's parameter block: raw pointers, 64-bit element strides and sizes, passed by value
// to the kernel. Plain C++ so the host code that fills it needs no CUDA headers.

#include <cstdint>

namespace kda::cuda {

// A [B, T, heads, cols] input (q, k, v, v_new, g, do, dv, A): element (b, t, head, col) lives at
// data[b * stride_batch + t * stride_token + head * stride_head + col * stride_col].
struct TokenView {
  const void* data = nullptr;
  int64_t stride_batch = 0;
  int64_t stride_token = 0;
  int64_t stride_head = 0;
  int64_t stride_col = 0;
};

// beta [B, T, HV], in X or float32 (`is_f32`).
struct BetaView {
  const void* data = nullptr;
  int64_t stride_batch = 0;
  int64_t stride_token = 0;
  int64_t stride_head = 0;
  bool is_f32 = false;
};

// h or dh [B, NT, HV, K, V] viewed as S[k][v] whatever the storage order: for state_v_first the
// host swaps the last two strides, so the kernel never branches on the layout.
struct StateView {
  const void* data = nullptr;
  int64_t stride_batch = 0;
  int64_t stride_chunk = 0;
  int64_t stride_head = 0;
  int64_t stride_k = 0;
  int64_t stride_v = 0;
};

// cu_seqlens [N+1] (stride1 unused) or chunk_indices [NT, 2], int32 or int64, device-resident.
struct IndexView {
  const void* data = nullptr;
  int64_t stride0 = 0;
  int64_t stride1 = 0;
  bool is_i64 = false;
};

struct WyDqkgParams {
  TokenView q, k;               // [B, T, H, K]  X
  TokenView v, v_new, do_, dv;  // [B, T, HV, V] X
  TokenView g;                  // [B, T, HV, K] f32
  TokenView A;                  // [B, T, HV, BT] X
  BetaView beta;                // [B, T, HV]
  StateView h, dh;              // [B, NT, HV, K, V] (strides as S[k][v])
  IndexView cu_seqlens;         // used when varlen
  IndexView chunk_indices;      // used when varlen && has_chunk_indices
  bool varlen = false;
  bool has_chunk_indices = false;

  // Outputs, contiguous row-major.
  float* dq = nullptr;     // [B, T, HV, K]
  float* dk = nullptr;     // [B, T, HV, K]
  float* dg = nullptr;     // [B, T, HV, K]
  void* dv_out = nullptr;  // [B, T, HV, V] X
  float* db = nullptr;     // [B, T, HV]
  float* dA = nullptr;     // [B, T, HV, BT]

  int64_t B = 0, T = 0, H = 0, HV = 0, K = 0, V = 0;
  int64_t NT = 0;               // chunks per batch row (fixed length) or in total (varlen)
  int64_t num_seqs = 0;         // N = len(cu_seqlens) - 1 (varlen)
  int64_t heads_per_group = 1;  // HV / H: value head hv reads query/key head hv / heads_per_group
  int64_t num_units = 0;        // work units = chunks * HV, one CTA each
  float scale = 1.0f;
};

}  // namespace kda::cuda
