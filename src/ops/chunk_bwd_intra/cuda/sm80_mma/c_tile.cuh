#pragma once
// The mma C layout of a task's accumulators through a [16][32] shared-memory tile, so that a
// column of it is one channel per lane (phase 1 hands results to phase 2 this way).

namespace kda::cuda::intra {

// The mma C layout (16 rows x 4 tiles of 8 channels; lane = (g, q) holds rows g, g + 8 and
// channels 8 nt + 2q, + 1) written as a row-major [16][32] tile with row pitch `ld` floats; a
// column of it is then one channel per lane. With ld = 32 the columns are XOR-swizzled by row
// (`swizzled`), with ld = 8 (mod 32) no swizzle is needed: either way the float2 writes of a
// half-warp and the column reads are free of bank conflicts.
__device__ __forceinline__ int tile_col(int row, int col, bool swizzled) {
  return swizzled ? col ^ (8 * (row % 4)) : col;
}

__device__ __forceinline__ void write_c_tile(float* tile, int ld, bool swizzled,
                                             const float (&acc)[4][4], int lane) {
  const int g = lane / 4;
  const int q = lane % 4;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = g + 8 * h;
      *reinterpret_cast<float2*>(tile + row * ld + tile_col(row, 8 * nt + 2 * q, swizzled)) =
          make_float2(acc[nt][2 * h], acc[nt][2 * h + 1]);
    }
  }
}

__device__ __forceinline__ float read_c_tile(const float* tile, int ld, bool swizzled, int row,
                                             int lane) {
  return tile[row * ld + tile_col(row, lane, swizzled)];
}

// Writes a value where read_c_tile(scratch tile: ld 32, swizzled) reads it.
__device__ __forceinline__ void write_c_tile_at(float* tile, int row, int lane, float value) {
  tile[row * 32 + tile_col(row, lane, true)] = value;
}

}  // namespace kda::cuda::intra
