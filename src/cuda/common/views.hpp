#pragma once
// The kernels' views of tensors: raw pointers and 64-bit element strides, passed by value inside
// each operator's parameter block. Plain C++, so the host code that fills them needs no CUDA
// headers.

#include <cstdint>

#include "kda/tensor.hpp"

namespace kda::cuda {

// A [B, T, heads, cols] tensor: element (b, t, head, col) lives at
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

// cu_seqlens [N+1] (stride1 unused) or chunk_indices [NT, 2], int32 or int64, device-resident.
struct IndexView {
  const void* data = nullptr;
  int64_t stride0 = 0;
  int64_t stride1 = 0;
  bool is_i64 = false;
};

// How the work of a problem splits into chunks: fixed length (B rows of NT chunks) or varlen
// (NT chunks in all, resolved through the device-resident cu_seqlens / chunk_indices).
struct ChunkLayout {
  IndexView cu_seqlens;     // used when varlen
  IndexView chunk_indices;  // used when varlen && has_chunk_indices
  bool varlen = false;
  bool has_chunk_indices = false;
  int64_t T = 0;         // tokens per batch row
  int64_t NT = 0;        // chunks per batch row (fixed length) or in total (varlen)
  int64_t num_seqs = 0;  // N = len(cu_seqlens) - 1 (varlen)
};

inline TokenView token_view(const TensorView& t) {
  return {t.data, t.strides[0], t.strides[1], t.strides[2], t.strides[3]};
}

inline BetaView beta_view(const TensorView& t) {
  return {t.data, t.strides[0], t.strides[1], t.strides[2], t.dtype == DType::f32};
}

inline IndexView index_view(const TensorView& t) {
  if (t.empty_arg()) return {};
  return {t.data, t.strides[0], t.rank > 1 ? t.strides[1] : 0, t.dtype == DType::i64};
}

inline ChunkLayout chunk_layout(const TensorView& cu_seqlens, const TensorView& chunk_indices,
                                int64_t T, int64_t NT, int64_t num_seqs) {
  ChunkLayout c;
  c.varlen = !cu_seqlens.empty_arg();
  c.has_chunk_indices = c.varlen && !chunk_indices.empty_arg();
  c.cu_seqlens = index_view(cu_seqlens);
  if (c.has_chunk_indices) c.chunk_indices = index_view(chunk_indices);
  c.T = T;
  c.NT = NT;
  c.num_seqs = num_seqs;
  return c;
}

}  // namespace kda::cuda
