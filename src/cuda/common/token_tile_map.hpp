#pragma once
// The tile map of a token tensor [B, T, heads, cols] (columns contiguous) for bulk tensor copies
// of `rows` tokens x `cols` columns of one head, shared by the kernels that copy token tiles.

#include <cstdint>

#include "cuda/common/tensor_map.hpp"
#include "kda/tensor.hpp"

namespace kda::cuda {

// Dims innermost first: columns, heads, tokens, batch. False when the columns are not contiguous
// or encode_tile_map_4d refuses the tensor or box (the caller then copies another way).
inline bool encode_token_rows_map(TensorMapBytes* map, const TensorView& t, int rows, int cols,
                                  TileSwizzle swizzle = TileSwizzle::none) {
  if (t.strides[3] != 1) return false;
  const auto elem = static_cast<uint64_t>(dtype_size(t.dtype));
  const uint64_t dims[4] = {static_cast<uint64_t>(t.shape[3]), static_cast<uint64_t>(t.shape[2]),
                            static_cast<uint64_t>(t.shape[1]), static_cast<uint64_t>(t.shape[0])};
  const uint64_t strides[3] = {static_cast<uint64_t>(t.strides[2]) * elem,
                               static_cast<uint64_t>(t.strides[1]) * elem,
                               static_cast<uint64_t>(t.strides[0]) * elem};
  const uint32_t box[4] = {static_cast<uint32_t>(cols), 1, static_cast<uint32_t>(rows), 1};
  return encode_tile_map_4d(map, t.data, static_cast<int>(elem), t.dtype == DType::f16, dims,
                            strides, box, swizzle);
}

}  // namespace kda::cuda
