#pragma once
// The kernels' views of tensors: raw pointers and 64-bit element strides, passed by value inside
// each operator's parameter block. Plain C++, so the host code that fills them needs no CUDA
// headers. The views are flat structs, none derived from another: BetaView as a ColumnView plus
// is_f32 (the same bytes) changed nvcc's code for five of chunk_bwd_wy_dqkg's simt kernels
// (dev/sass-compare.py).

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

// A TokenView whose rows can also be read by asynchronous copies: `copy_bytes` is the widest
// copy (16, 8 or 4 bytes) that every row of the tensor can be read with (columns contiguous, every
// row start aligned to it); 0: read element by element.
struct TokenCopyView {
  const void* data = nullptr;
  int64_t stride_batch = 0;
  int64_t stride_token = 0;
  int64_t stride_head = 0;
  int64_t stride_col = 0;
  int copy_bytes = 0;
};

// A [B, T, heads] tensor (one value per token and head): element (b, t, head) lives at
// data[b * stride_batch + t * stride_token + head * stride_head].
struct ColumnView {
  const void* data = nullptr;
  int64_t stride_batch = 0;
  int64_t stride_token = 0;
  int64_t stride_head = 0;
};

// beta [B, T, HV], in X or float32 (`is_f32`): a ColumnView's fields and the dtype.
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

// The widest of 16, 8, 4 bytes that every row start of `t` is aligned to (data pointer and all
// strides but the last), with a unit column stride; 0 when none (element-by-element copies).
inline int row_copy_bytes(const TensorView& t) {
  if (t.strides[t.rank - 1] != 1) return 0;
  const auto elem = static_cast<int64_t>(dtype_size(t.dtype));
  for (int bytes : {16, 8, 4}) {
    if (bytes < elem || reinterpret_cast<uintptr_t>(t.data) % bytes != 0) continue;
    bool aligned = true;
    for (int d = 0; d + 1 < t.rank; ++d) aligned = aligned && (t.strides[d] * elem) % bytes == 0;
    if (aligned) return bytes;
  }
  return 0;
}

inline TokenCopyView token_copy_view(const TensorView& t) {
  return {t.data, t.strides[0], t.strides[1], t.strides[2], t.strides[3], row_copy_bytes(t)};
}

// h/dh as S[k][v]: for state_v_first the stored order is [.., V, K], so the strides swap.
inline StateView state_view(const TensorView& t, bool state_v_first) {
  const int64_t stride_k = state_v_first ? t.strides[4] : t.strides[3];
  const int64_t stride_v = state_v_first ? t.strides[3] : t.strides[4];
  return {t.data, t.strides[0], t.strides[1], t.strides[2], stride_k, stride_v};
}

inline ColumnView column_view(const TensorView& t) {
  return {t.data, t.strides[0], t.strides[1], t.strides[2]};
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
