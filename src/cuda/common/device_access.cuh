#pragma once
// Device-side element access: dtype conversion to and from float32, strided tile loads into
// shared memory, and the small fixed-order dot products every product in the kernel is built of.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/views.hpp"

namespace kda::cuda {

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// Round to nearest even, as the CPU backends do.
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

template <typename T>
__device__ __forceinline__ float load_float(const void* data, int64_t offset) {
  return to_float(static_cast<const T*>(data)[offset]);
}

// One element of a device-resident index tensor (cu_seqlens or chunk_indices).
__device__ __forceinline__ int64_t load_index(const IndexView& index, int64_t offset) {
  return index.is_i64 ? static_cast<const int64_t*>(index.data)[offset]
                      : static_cast<int64_t>(static_cast<const int32_t*>(index.data)[offset]);
}

// acc + a·b, summed x, y, z, w in that order (fixed order: bitwise-reproducible).
__device__ __forceinline__ float dot4_acc(float4 a, float4 b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

__device__ __forceinline__ float4 load_float4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}

// kN contiguous floats from shared memory (16-byte aligned when kN % 4 == 0, else 8-byte).
template <int kN>
__device__ __forceinline__ void load_row(const float* p, float (&out)[kN]) {
  if constexpr (kN % 4 == 0) {
#pragma unroll
    for (int n = 0; n < kN; n += 4) {
      const float4 x = load_float4(p + n);
      out[n] = x.x;
      out[n + 1] = x.y;
      out[n + 2] = x.z;
      out[n + 3] = x.w;
    }
  } else {
    static_assert(kN % 2 == 0, "rows per thread must be even");
#pragma unroll
    for (int n = 0; n < kN; n += 2) {
      const float2 x = *reinterpret_cast<const float2*>(p + n);
      out[n] = x.x;
      out[n + 1] = x.y;
    }
  }
}

// Where one 32-wide tile comes from: element (r, c) of the tile is
// data[origin + r * row_stride + c * col_stride].
struct TileSource {
  const void* data;
  int64_t origin;
  int64_t row_stride;
  int64_t col_stride;
};

// Loads up to kCount tiles of kRows x 32 (the first `count` of them) into shared memory as
// float32 [kRows][ld], zero-filling rows >= valid_rows and columns >= valid_cols (nothing outside
// the valid box is read). Called by all 8 warps: warp w loads rows w, w + 8, ...; lane c loads
// column c, so a warp reads one row's 32 consecutive columns (coalesced when col_stride == 1).
// With `lanes_along_rows` the roles swap (lane c loads row c, warp w columns w, w + 8, ...): for
// an h tile stored [V, K], whose tile rows (k) are the contiguous ones; kRows must then be 32.
//
// The row loop stays rolled (unroll 2) on purpose: fully unrolled, the compiler precomputes every
// element's 64-bit address once per unit and keeps them all in registers across the K and V
// loops, which costs more registers than the loads' latency hiding is worth.
template <typename T, int kRows, int kCount>
__device__ __forceinline__ void load_tiles(float* const (&dst)[kCount],
                                           const TileSource (&src)[kCount], int count, int ld,
                                           int valid_rows, int valid_cols, bool lanes_along_rows) {
  static_assert(kRows % 8 == 0, "rows are spread over 8 warps");
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll 2
  for (int step = warp; step < (lanes_along_rows ? 32 : kRows); step += 8) {
    const int row = lanes_along_rows ? lane : step;
    const int col = lanes_along_rows ? step : lane;
    const bool inside = row < valid_rows && col < valid_cols;
    float x[kCount];
#pragma unroll
    for (int t = 0; t < kCount; ++t) {
      x[t] = 0.0f;
      if (t < count && inside) {
        x[t] = to_float(static_cast<const T*>(
            src[t].data)[src[t].origin + row * src[t].row_stride + col * src[t].col_stride]);
      }
    }
#pragma unroll
    for (int t = 0; t < kCount; ++t) {
      if (t < count) dst[t][row * ld + col] = x[t];
    }
  }
}

}  // namespace kda::cuda
