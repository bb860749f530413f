#pragma once
// Tensor maps (TMA descriptors) for the kernels' bulk tile copies, encoded on the host. Plain C++:
// the parameter blocks that carry them need no CUDA headers.

#include <cstdint>

namespace kda::cuda {

// The bytes of one CUtensorMap (128 bytes, 64-byte aligned, as the driver requires). A kernel
// reads it from its __grid_constant__ parameter block.
struct alignas(64) TensorMapBytes {
  uint64_t words[16] = {};
};

// How a box lands in shared memory: as stored (rows at the box's row pitch), or with the 128-byte
// swizzle (16-byte chunk c of row r at chunk c ^ (r % 8); a box row at most 128 bytes, the
// destination 1024-byte aligned), the layout wgmma's swizzled descriptors read (wgmma.cuh).
enum class TileSwizzle { none, bytes128 };

// A rank-4 tile map [d3][d2][d1][d0] (d0 innermost, contiguous) over `data` for boxes of
// box[0] x box[1] x box[2] x box[3] elements of `elem_bytes` (2 or 4; `is_float16`: a 2-byte float
// is half rather than bfloat16). `strides`: bytes between consecutive indices of d1, d2, d3. A
// box's elements outside the tensor are filled with zeros. False when the tensor or box breaks a
// rule of the hardware (data or strides not 16-byte aligned, a box row not a multiple of 16
// bytes, a box side over 256) or the driver refuses the encoding: the caller then copies another
// way.
bool encode_tile_map_4d(TensorMapBytes* map, const void* data, int elem_bytes, bool is_float16,
                        const uint64_t (&dims)[4], const uint64_t (&strides)[3],
                        const uint32_t (&box)[4], TileSwizzle swizzle = TileSwizzle::none);

// The hardware's rules that encode_tile_map_4d checks before it asks the driver: true when a
// rank-4 tile map of these arguments can exist.
bool tile_map_supported(const void* data, int elem_bytes, const uint64_t (&dims)[4],
                        const uint64_t (&strides)[3], const uint32_t (&box)[4],
                        TileSwizzle swizzle = TileSwizzle::none);

}  // namespace kda::cuda
