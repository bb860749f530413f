#pragma once
// The chunk_bwd_dhu kernels' parameter block: raw pointers, 64-bit element strides and sizes,
// passed by value. Plain C++, so the host code that fills it needs no CUDA headers.

#include <cstdint>

#include "cuda/common/views.hpp"

namespace kda::cuda::dhu {

// A per-sequence state [N, HV, K, V] (or [.., V, K]) viewed as S[k][v]: for state_v_first the
// host swaps the last two strides, so the kernels never branch on the layout.
struct SeqStateView {
  const void* data = nullptr;
  int64_t stride_seq = 0;
  int64_t stride_head = 0;
  int64_t stride_k = 0;
  int64_t stride_v = 0;
};

struct DhuParams {
  TokenView q, k;     // [B, T, H, K] X
  TokenView w;        // [B, T, HV, K] X
  TokenView do_, dv;  // [B, T, HV, V] X
  ColumnView g;       // [B, T, HV] float32; data null when absent
  TokenView gk;       // [B, T, HV, K] float32; data null when absent
  SeqStateView dht;   // X or float32 (dht_is_f32); data null when absent
  bool dht_is_f32 = false;
  IndexView cu_seqlens;  // varlen only
  bool varlen = false;

  // Outputs, contiguous: dh as S[k][v] per (batch row, chunk, value head); dh0 likewise per
  // sequence; dv2 row-major [B, T, HV, V].
  StateView dh;
  SeqStateView dh0;
  void* dv2 = nullptr;

  int64_t B = 0, T = 0, H = 0, HV = 0, K = 0, V = 0;
  int64_t NT = 0;               // dh's chunk extent: per batch row, or in total when varlen
  int64_t num_seqs = 0;         // B, or len(cu_seqlens) - 1
  int64_t heads_per_group = 1;  // HV / H
  int chunk_size = 64;
  float scale = 1.0f;
};

}  // namespace kda::cuda::dhu
