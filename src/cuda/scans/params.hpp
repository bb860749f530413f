#pragma once
// The state scans' parameter block (chunk_fwd_h's forward scan, chunk_bwd_dhu's reverse scan):
// raw pointers, 64-bit element strides and sizes, passed by value. The two scans have one
// shape (docs/design.md, "The state scans"), so one block names what each reads and writes.
// Plain C++, so the host code that fills it needs no CUDA headers.

#include <cstdint>

#include "cuda/common/tensor_map.hpp"
#include "cuda/common/views.hpp"

namespace kda::cuda::scans {

// A per-sequence state [N, HV, K, V] (or [.., V, K]) viewed as S[k][v]: for state_v_first the
// host swaps the last two strides, so the kernels never branch on the layout.
struct SeqStateView {
  const void* data = nullptr;
  int64_t stride_seq = 0;
  int64_t stride_head = 0;
  int64_t stride_k = 0;
  int64_t stride_v = 0;
};

struct ScanParams {
  TokenView q;            // reverse: [B, T, H, K] X (KDA: qg); forward: unused
  TokenView k;            // [B, T, H, K] X (KDA: kg)
  TokenView w;            // [B, T, HV, K] X
  TokenView do_;          // reverse: [B, T, HV, V] X; forward: unused
  TokenView values;       // [B, T, HV, V] X: reverse dv, forward u
  ColumnView g;           // [B, T, HV] float32; data null when absent
  TokenView gk;           // [B, T, HV, K] float32; data null when absent
  SeqStateView state_in;  // reverse dht, forward initial_state: X or float32; null when absent
  bool state_in_is_f32 = false;
  IndexView cu_seqlens;  // varlen only
  bool varlen = false;

  // Outputs, contiguous: the per-chunk states as S[k][v] (reverse dh, the gradient at each
  // chunk's end; forward h, the state at its start), the per-sequence state after the walk
  // (reverse dh0, forward final_state; float32) and the values (reverse dv2, forward v_new;
  // row-major [B, T, HV, V] in X).
  StateView states;
  SeqStateView state_out;
  void* values_out = nullptr;

  int64_t B = 0, T = 0, H = 0, HV = 0, K = 0, V = 0;
  int64_t NT = 0;               // the states' chunk extent: per batch row, or in total (varlen)
  int64_t num_seqs = 0;         // B, or len(cu_seqlens) - 1
  int64_t heads_per_group = 1;  // HV / H
  int chunk_size = 64;
  float scale = 1.0f;  // reverse only

  // The tensor-core kernel's tile maps of its K-wide tiles (encode_tile_maps): the per-token
  // product's A (reverse k, forward w), the update's A (reverse w, forward k), q (reverse).
  TensorMapBytes first_map, second_map, q_map;
};

}  // namespace kda::cuda::scans
