#pragma once
// Quad columns, shared by the 16-bit (sm80_mma) and 3xTF32 kernels' traits: where two n8 tiles
// per warp cover 16 k columns, a slab's k rows are permuted within each 16 so that a lane's four
// accumulator columns of a row (2 quad + e of tile 0 and of tile 1: positions 2 quad + e and
// 8 + 2 quad + e) are the four consecutive k 4 quad + 2 tile + e. Its g, q, k loads and dq, dk,
// dg stores are then one access per row instead of two of half the width.

namespace kda::cuda::wy {

// The position within the slab of its k row `row` under quad columns.
__host__ __device__ constexpr int quad_col_row_pos(int row) {
  const int r = row % 16;  // k within the warp's 16: 4 quad + 2 tile + e
  return row - r + 8 * ((r >> 1) & 1) + 2 * (r >> 2) + (r & 1);
}

// What the epilogues assume of quad_col_row_pos: a permutation of each 16 rows that puts
// k = 4 quad + 2 tile + e at accumulator column 8 tile + 2 quad + e of the warp's 16.
constexpr bool quad_cols_layout_holds() {
  bool seen[32] = {};
  for (int k = 0; k < 32; ++k) {
    const int pos = quad_col_row_pos(k);
    if (pos / 16 != k / 16 || seen[pos]) return false;  // within its 16, once
    seen[pos] = true;
  }
  for (int quad = 0; quad < 4; ++quad) {
    for (int tile = 0; tile < 2; ++tile) {
      for (int e = 0; e < 2; ++e) {
        if (quad_col_row_pos(16 + 4 * quad + 2 * tile + e) != 16 + 8 * tile + 2 * quad + e) {
          return false;
        }
      }
    }
  }
  return true;
}
static_assert(quad_cols_layout_holds(), "quad_col_row_pos permutes each 16 rows as quad columns");

}  // namespace kda::cuda::wy
