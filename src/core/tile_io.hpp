#pragma once
// Moving 2-D tiles between strided tensor views and contiguous float32 buffers, for the cpu
// backend. The dtype switch sits outside the loops so each copy loop is a plain typed loop; a
// unit column stride gets its own loop so the compiler can vectorize the common contiguous case.

#include <cstdint>
#include <limits>
#include <vector>

#include "core/element.hpp"
#include "kda/tensor.hpp"

namespace kda::cpu {

// A rows x cols tile of a view: element (r, c) is at `offset + r * row_stride + c * col_stride`.
struct TileRef {
  int64_t offset = 0;
  int64_t rows = 0;
  int64_t row_stride = 0;
  int64_t cols = 0;
  int64_t col_stride = 0;
};

namespace tile_detail {

template <typename Elem, typename Convert>
void gather_typed(const Elem* base, const TileRef& tile, float* dst, Convert convert) {
  for (int64_t r = 0; r < tile.rows; ++r) {
    const Elem* src = base + tile.offset + r * tile.row_stride;
    float* out = dst + r * tile.cols;
    if (tile.col_stride == 1) {
      for (int64_t c = 0; c < tile.cols; ++c) out[c] = convert(src[c]);
    } else {
      for (int64_t c = 0; c < tile.cols; ++c) out[c] = convert(src[c * tile.col_stride]);
    }
  }
}

template <typename Elem, typename Convert>
void scatter_typed(Elem* base, const TileRef& tile, const float* src, Convert convert) {
  for (int64_t r = 0; r < tile.rows; ++r) {
    Elem* dst = base + tile.offset + r * tile.row_stride;
    const float* in = src + r * tile.cols;
    for (int64_t c = 0; c < tile.cols; ++c) dst[c * tile.col_stride] = convert(in[c]);
  }
}

}  // namespace tile_detail

// Copies the tile into dst (row-major, rows x cols, leading dimension cols) as float32.
inline void gather_tile(const TensorView& t, const TileRef& tile, float* dst) {
  using namespace tile_detail;
  switch (t.dtype) {
    case DType::f16:
      return gather_typed(static_cast<const uint16_t*>(t.data), tile, dst,
                          [](uint16_t x) { return f16_bits_to_float(x); });
    case DType::bf16:
      return gather_typed(static_cast<const uint16_t*>(t.data), tile, dst,
                          [](uint16_t x) { return bf16_bits_to_float(x); });
    case DType::f32:
      return gather_typed(static_cast<const float*>(t.data), tile, dst, [](float x) { return x; });
    default:  // validate() admits only the three float dtypes here; poison rather than guess
      for (int64_t i = 0; i < tile.rows * tile.cols; ++i) {
        dst[i] = std::numeric_limits<float>::quiet_NaN();
      }
  }
}

// Stores src (row-major, rows x cols) into the tile, rounding to the view's dtype.
inline void scatter_tile(const TensorView& t, const TileRef& tile, const float* src) {
  using namespace tile_detail;
  switch (t.dtype) {
    case DType::f16:
      return scatter_typed(static_cast<uint16_t*>(t.data), tile, src,
                           [](float x) { return float_to_f16_bits(x); });
    case DType::bf16:
      return scatter_typed(static_cast<uint16_t*>(t.data), tile, src,
                           [](float x) { return float_to_bf16_bits(x); });
    case DType::f32:
      return scatter_typed(static_cast<float*>(t.data), tile, src, [](float x) { return x; });
    default:  // never an output dtype: validate() rejects it
      return;
  }
}

// Rows t0 .. t0+rows-1 of head `head` of a [B, T, heads, cols] view.
inline TileRef head_rows(const TensorView& t, int64_t b, int64_t t0, int64_t rows, int64_t head,
                         int64_t cols) {
  return {offset_of(t, b, t0, head, 0), rows, t.strides[1], cols, t.strides[3]};
}

// Rows t0 .. t0+rows-1 of head `head` of a [B, T, heads] view, as a rows x 1 tile.
inline TileRef head_column(const TensorView& t, int64_t b, int64_t t0, int64_t rows, int64_t head) {
  return {offset_of(t, b, t0, head), rows, t.strides[1], 1, 1};
}

// The K x V state h[h_batch, h_chunk, hv] of a [.., K, V] view, or of a [.., V, K] view when
// state_v_first (then S[k][v] = h[.., v, k]: the tile walks the view transposed).
inline TileRef state_tile(const TensorView& t, int64_t h_batch, int64_t h_chunk, int64_t hv,
                          int64_t K, int64_t V, bool state_v_first) {
  const int64_t offset = offset_of(t, h_batch, h_chunk, hv, 0, 0);
  return state_v_first ? TileRef{offset, K, t.strides[4], V, t.strides[3]}
                       : TileRef{offset, K, t.strides[3], V, t.strides[4]};
}

// The K x V state [n, hv] of a per-sequence [N, HV, K, V] view (a scan's initial or final state,
// dht, dh0), walked transposed when the view is [N, HV, V, K] (state_v_first).
inline TileRef sequence_state(const TensorView& t, int64_t n, int64_t hv, int64_t K, int64_t V,
                              bool state_v_first) {
  const int64_t offset = offset_of(t, n, hv, 0, 0);
  return state_v_first ? TileRef{offset, K, t.strides[3], V, t.strides[2]}
                       : TileRef{offset, K, t.strides[2], V, t.strides[3]};
}

// `tile` of `t` into `dst`, resized to the tile's elements.
inline void gather(const TensorView& t, const TileRef& tile, std::vector<float>& dst) {
  dst.resize(static_cast<size_t>(tile.rows * tile.cols));
  gather_tile(t, tile, dst.data());
}

// x rounded to `dtype` (float16, bfloat16; float32 unchanged), as a float: where a float32
// backend mirrors a GPU kernel's operand in X.
inline float round_to(DType dtype, float x) {
  if (dtype == DType::bf16) return bf16_bits_to_float(float_to_bf16_bits(x));
  if (dtype == DType::f16) return f16_bits_to_float(float_to_f16_bits(x));
  return x;
}

}  // namespace kda::cpu
