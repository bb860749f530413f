#pragma once
// The token-tile copy of chunk_bwd_wy_dqkg's tensor-core kernels (the 16-bit sm80_mma kernel and
// the float32 tf32x3 kernel): one [rows x cols] tile of a unit's rows, global -> shared memory by
// cp.async, with the rows and columns outside the chunk zero-filled.

#include <cstdint>

#include "cuda/common/mma_fragments.cuh"
#include "cuda/common/wgmma.cuh"

namespace kda::cuda {

// Queues cp.async copies of a [kRows x kCols] tile of T (row r at src + r * src_row_stride,
// columns contiguous) into dst [kRows][dst_ld]. Only rows < valid_rows and columns < valid_cols
// are read; everything else of the tile is zero-filled. Chunk c = tid + n * kThreads covers
// row c / (kCols / chunk) and 16 bytes of it. kSwizzled: dst is a tile of 128-byte-swizzled
// atoms [kRows][64] (dst_ld unused), wgmma's K-major layout.
template <int kRows, int kCols, int kThreads, bool kSwizzled = false, typename T>
__device__ __forceinline__ void copy_tile_async(T* dst, int dst_ld, const T* src,
                                                int64_t src_row_stride, int valid_rows,
                                                int valid_cols, int tid) {
  constexpr int kChunkElems = 16 / static_cast<int>(sizeof(T));
  constexpr int kChunksPerRow = kCols / kChunkElems;
  constexpr int kChunks = kRows * kChunksPerRow;
  static_assert(kCols % kChunkElems == 0, "rows are whole 16-byte chunks");
#pragma unroll
  for (int n = 0; n < (kChunks + kThreads - 1) / kThreads; ++n) {
    const int c = tid + n * kThreads;
    if (kChunks % kThreads != 0 && c >= kChunks) break;
    const int row = c / kChunksPerRow;
    const int col = (c % kChunksPerRow) * kChunkElems;
    const int cols_left = valid_cols - col;
    int bytes = 0;
    if (row < valid_rows && cols_left > 0) {
      bytes = cols_left >= kChunkElems ? 16 : cols_left * static_cast<int>(sizeof(T));
    }
    const T* from = bytes > 0 ? src + row * src_row_stride + col : src;
    int to = row * dst_ld + col;
    if constexpr (kSwizzled) {
      static_assert(sizeof(T) == 2 && kCols % 64 == 0, "swizzled atoms hold 64 16-bit columns");
      to = wgmma::sw128_element_index<kRows>(row, col);
    }
    mma::cp_async_16(dst + to, from, bytes);
  }
}

}  // namespace kda::cuda
