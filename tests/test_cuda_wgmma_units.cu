// Unit tests of the wgmma building block (src/cuda/common/wgmma.cuh), which the WY operator's
// tensor-core kernel uses at BT = 64, each small enough that a failure names the piece:
//   1. the 128-byte swizzle's byte map (host, runs without a GPU): a bijection of every 8-row
//      group of a tile onto itself that keeps bytes inside their 16-byte chunk;
//   2. one warpgroup's 64 x 64 x 64 bf16 product from swizzled K-major shared-memory tiles
//      through matrix descriptors (four k16 steps, the descriptor advanced along k), against a
//      float64 host product, on a poisoned output; and the accumulate flag (a second pass adds);
//   3. the shape of one WY slab product (64 x 16 over k = 128: two swizzled tiles along k, the
//      m64n16k16 form), and the WY kernel's K-loop form (m64n8k16 from the second 8-row half of
//      a slab copy);
//   4. the 64 x 64 product with the tiles written by bulk tensor copies with the 128-byte swizzle
//      (tensor_map.hpp's TileSwizzle::bytes128): the copy engine's layout is the one the
//      descriptors read, and the map rules.

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "cuda/common/tensor_map.hpp"
#include "cuda/common/tma.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda_unit_test.hpp"

namespace {

namespace wg = kda::cuda::wgmma;

constexpr int kRows = 64;  // M of A, N of B (rows of Bᵀ)
constexpr int kK = 64;     // one 128-byte swizzle atom of bf16 per row
constexpr int kTileBytes = kRows * kK * 2;

TEST(WgmmaSwizzle, MapsEachEightRowGroupOntoItselfChunkByChunk) {
  for (int group = 0; group < kRows / 8; ++group) {
    std::set<int> seen;
    for (int r = 8 * group; r < 8 * group + 8; ++r) {
      for (int k_byte = 0; k_byte < 128; ++k_byte) {
        const int at = wg::swizzle128_offset(r, k_byte);
        EXPECT_EQ(at / 128, r) << "a byte leaves its row";
        EXPECT_EQ(at % 16, k_byte % 16) << "a byte leaves its place in its 16-byte chunk";
        seen.insert(at);
      }
    }
    EXPECT_EQ(seen.size(), 1024u) << "group " << group << " is not a bijection";
    EXPECT_EQ(*seen.begin(), 1024 * group);
    EXPECT_EQ(*seen.rbegin(), 1024 * group + 1023);
  }
  // The element index of 16-bit tiles of several atoms (the WY kernel's token tiles and slab
  // copies) is the byte map per atom, atoms of rows * 64 elements one after the other.
  for (int row = 0; row < 64; ++row) {
    for (int col = 0; col < 128; ++col) {
      const int want =
          (col / 64) * 64 * 64 + row * 64 + (((col % 64) / 8) ^ (row % 8)) * 8 + col % 8;
      ASSERT_EQ(wg::sw128_element_index<64>(row, col), want) << "row " << row << " col " << col;
    }
  }
  // Row 0 keeps its order; row 1's first chunk sits in chunk slot 1 (the swizzle is not a no-op).
  EXPECT_EQ(wg::swizzle128_offset(0, 32), 32);
  EXPECT_EQ(wg::swizzle128_offset(1, 0), 128 + 16);
  EXPECT_EQ(wg::swizzle128_offset(9, 0), 9 * 128 + 16);
}

// The first 1024-byte boundary in dynamic shared memory (which is only guaranteed 16-byte
// alignment): swizzled tiles start there, so the descriptors' base offset is 0.
__device__ unsigned char* aligned_1024(unsigned char* raw) {
  const uint32_t at = kda::cuda::tma::smem_address(raw);
  return raw + (1024 - at % 1024) % 1024;
}

// The product's epilogue: the accumulators of a 64 x kN tile to d [64][kN] row-major
// (wgmma.cuh's layout).
template <int kN>
__device__ void store_accumulators(const float (&acc)[kN / 2], float* d) {
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        d[(16 * warp + lane / 4 + 8 * h) * kN + 8 * j + 2 * (lane % 4) + e] =
            acc[4 * j + 2 * h + e];
      }
    }
  }
}

// D = passes · A · Bᵀ: a [64][64] and bt [64][64] bf16 row-major (k contiguous) in global
// memory, d [64][64] float32. One warpgroup.
__global__ void wgmma_product_kernel(const __nv_bfloat16* a, const __nv_bfloat16* bt, float* d,
                                     int passes) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = aligned_1024(smem_raw);
  unsigned char* tile_a = smem;
  unsigned char* tile_b = smem + kTileBytes;
  const int tid = static_cast<int>(threadIdx.x);
  for (int i = tid; i < kRows * kK; i += blockDim.x) {
    const int r = i / kK;
    const int k = i % kK;
    *reinterpret_cast<__nv_bfloat16*>(tile_a + wg::swizzle128_offset(r, 2 * k)) = a[i];
    *reinterpret_cast<__nv_bfloat16*>(tile_b + wg::swizzle128_offset(r, 2 * k)) = bt[i];
  }
  // The tiles are written by ordinary stores and read by the tensor cores' async proxy.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  float acc[32];
  for (float& x : acc) x = 0.0f;
  wg::fence();
  for (int pass = 0; pass < passes; ++pass) {
#pragma unroll
    for (int s = 0; s < kK / 16; ++s) {
      wg::mma_m64n64k16_bf16(acc, wg::k_major_sw128_desc(tile_a, 32 * s),
                             wg::k_major_sw128_desc(tile_b, 32 * s), pass > 0 || s > 0);
    }
  }
  wg::commit_group();
  wg::wait_group<0>();

  store_accumulators<kRows>(acc, d);
}

struct TileMaps {
  kda::cuda::TensorMapBytes a, bt;
};

// D = A · Bᵀ with both tiles brought in by one bulk tensor copy each, swizzled by the copy.
__global__ void wgmma_tma_product_kernel(const __grid_constant__ TileMaps maps, float* d) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t bar;
  unsigned char* tile_a = aligned_1024(smem_raw);
  unsigned char* tile_b = tile_a + kTileBytes;
  namespace tma = kda::cuda::tma;
  if (threadIdx.x == 0) {
    tma::barrier_init(&bar);
    tma::barrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    tma::barrier_arrive_expect(&bar, 2 * kTileBytes);
    tma::copy_tile_4d(tile_a, maps.a, &bar, 0, 0, 0, 0);
    tma::copy_tile_4d(tile_b, maps.bt, &bar, 0, 0, 0, 0);
  }
  tma::barrier_wait(&bar, 0);
  float acc[32];
  for (float& x : acc) x = 0.0f;
  wg::fence();
#pragma unroll
  for (int s = 0; s < kK / 16; ++s) {
    wg::mma_m64n64k16_bf16(acc, wg::k_major_sw128_desc(tile_a, 32 * s),
                           wg::k_major_sw128_desc(tile_b, 32 * s), s > 0);
  }
  wg::commit_group();
  wg::wait_group<0>();
  store_accumulators<kRows>(acc, d);
}

// A [64][64] bf16 tile as one swizzled box: dims (k, 1, rows, 1), innermost first.
bool encode_tile(kda::cuda::TensorMapBytes* map, const void* data) {
  const uint64_t dims[4] = {kK, 1, kRows, 1};
  const uint64_t strides[3] = {kK * 2, kK * 2, kTileBytes};
  const uint32_t box[4] = {kK, 1, kRows, 1};
  return kda::cuda::encode_tile_map_4d(map, data, 2, false, dims, strides, box,
                                       kda::cuda::TileSwizzle::bytes128);
}

// Runs `launch(a_dev, bt_dev, d_dev)` on fresh random A [64][k] and Bᵀ [n][k] (bf16, k
// contiguous) and checks d [64][n] = passes · A · Bᵀ against float64, on a poisoned d.
template <typename Launch>
void check_product(int n_cols, int k_len, int passes, Launch launch) {
  std::mt19937 rng(20261201u + static_cast<unsigned>(passes * 1000 + n_cols + k_len));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<__nv_bfloat16> a(kRows * k_len), bt(n_cols * k_len);
  for (auto& x : a) x = __float2bfloat16(uniform(rng));
  for (auto& x : bt) x = __float2bfloat16(uniform(rng));
  const size_t a_bytes = a.size() * 2, b_bytes = bt.size() * 2;
  const size_t d_bytes = static_cast<size_t>(kRows) * n_cols * sizeof(float);

  __nv_bfloat16* a_dev = nullptr;
  __nv_bfloat16* b_dev = nullptr;
  float* d_dev = nullptr;
  ASSERT_CUDA(cudaMalloc(&a_dev, a_bytes));
  ASSERT_CUDA(cudaMalloc(&b_dev, b_bytes));
  ASSERT_CUDA(cudaMalloc(&d_dev, d_bytes));
  ASSERT_CUDA(cudaMemcpy(a_dev, a.data(), a_bytes, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpy(b_dev, bt.data(), b_bytes, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemset(d_dev, 0xff, d_bytes));  // NaN: every element must be written
  launch(a_dev, b_dev, d_dev);
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<float> d(static_cast<size_t>(kRows) * n_cols);
  ASSERT_CUDA(cudaMemcpy(d.data(), d_dev, d_bytes, cudaMemcpyDeviceToHost));
  cudaFree(a_dev);
  cudaFree(b_dev);
  cudaFree(d_dev);

  int bad = 0;
  for (int m = 0; m < kRows; ++m) {
    for (int n = 0; n < n_cols; ++n) {
      double ref = 0.0, mag = 0.0;
      for (int k = 0; k < k_len; ++k) {
        const double x = __bfloat162float(a[m * k_len + k]);
        const double y = __bfloat162float(bt[n * k_len + k]);
        ref += x * y;
        mag += std::fabs(x * y);
      }
      ref *= passes;
      mag *= passes;
      const double got = d[m * n_cols + n];
      // bf16 products are exact in float32; only the float32 sums round.
      if (!(std::fabs(got - ref) <= 1e-5 * mag + 1e-6) && bad++ < 8) {
        ADD_FAILURE() << "d[" << m << "][" << n << "] = " << got << ", expected " << ref;
      }
    }
  }
  EXPECT_EQ(bad, 0) << "elements off (n " << n_cols << ", k " << k_len << ", passes " << passes
                    << ")";
}

// Stores value(r, k) of a [rows][128] bf16 matrix into two 128-byte-swizzled 64-k tiles of
// `rows` rows (the second rows * 128 bytes after the first), the block's threads in turn.
template <typename Value>
__device__ void store_two_k_tiles(unsigned char* tiles, int rows, Value value) {
  for (int i = static_cast<int>(threadIdx.x); i < rows * 128; i += static_cast<int>(blockDim.x)) {
    const int r = i / 128, k = i % 128;
    *reinterpret_cast<__nv_bfloat16*>(tiles + (k / 64) * rows * 128 +
                                      wg::swizzle128_offset(r, 2 * (k % 64))) = value(r, k);
  }
}

// The shape of one h slab's product in the WY kernel: D [64][16] = A [64][128] · Bᵀ, Bᵀ [16][128]
// (e.g. dO · Sᵀ over V = 128): each operand two swizzled 64-k tiles (8 KB and 2 KB), eight k16
// steps crossing from the first tile to the second.
__global__ void wgmma_slab_product_kernel(const __nv_bfloat16* a, const __nv_bfloat16* bt,
                                          float* d) {
  constexpr int kSlabN = 16, kLongK = 128;
  constexpr int kAtomA = kRows * 128, kAtomB = kSlabN * 128;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* tiles_a = aligned_1024(smem_raw);
  unsigned char* tiles_b = tiles_a + 2 * kAtomA;
  store_two_k_tiles(tiles_a, kRows, [&](int r, int k) { return a[r * kLongK + k]; });
  store_two_k_tiles(tiles_b, kSlabN, [&](int r, int k) { return bt[r * kLongK + k]; });
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  float acc[8];
  for (float& x : acc) x = 0.0f;
  wg::fence();
#pragma unroll
  for (int s = 0; s < kLongK / 16; ++s) {
    wg::mma_m64n16k16<__nv_bfloat16>(acc, wg::k_major_sw128_desc_step(tiles_a, kAtomA, s),
                                     wg::k_major_sw128_desc_step(tiles_b, kAtomB, s), s > 0);
  }
  wg::commit_group();
  wg::wait_group<0>();
  store_accumulators<kSlabN>(acc, d);
}

// The WY kernel's K-loop form (sm80_mma traits' kWgmmaLoop): D [64][8] = A [64][128] · Bᵀ with
// Bᵀ the second 8-row half of a 16-row slab copy (rows 8..15: 1024 bytes into each atom), m64n8k16
// over eight k16 steps. Rows 0..7 of the slab hold other values that must not leak in.
__global__ void wgmma_half_slab_kernel(const __nv_bfloat16* a, const __nv_bfloat16* bt, float* d) {
  constexpr int kSlabRows = 16, kLongK = 128;
  constexpr int kAtomA = kRows * 128, kAtomB = kSlabRows * 128;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* tiles_a = aligned_1024(smem_raw);
  unsigned char* tiles_b = tiles_a + 2 * kAtomA;
  store_two_k_tiles(tiles_a, kRows, [&](int r, int k) { return a[r * kLongK + k]; });
  store_two_k_tiles(tiles_b, kSlabRows, [&](int r, int k) {
    return r >= 8 ? bt[(r - 8) * kLongK + k] : __float2bfloat16(1000.0f + r);
  });
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const uint64_t desc_a = wg::k_major_sw128_desc(tiles_a, 0);
  const uint64_t desc_b = wg::k_major_sw128_desc(tiles_b + 8 * 128, 0);
  wg::fence_operands(acc);
  wg::fence();
#pragma unroll
  for (int s = 0; s < kLongK / 16; ++s) {
    // The kernel's descriptor arithmetic: the base descriptor plus the step's offset >> 4.
    wg::mma_m64n8k16<__nv_bfloat16>(acc, desc_a + (((s / 4) * kAtomA + 32 * (s % 4)) >> 4),
                                    desc_b + (((s / 4) * kAtomB + 32 * (s % 4)) >> 4), s > 0);
  }
  wg::commit_group();
  wg::wait_group<0>();
  wg::fence_operands(acc);
  store_accumulators<8>(acc, d);
}

constexpr int kProductSmem = 2 * kTileBytes + 1024;

void run_threads_swizzled(int passes) {
  check_product(kRows, kK, passes, [&](const __nv_bfloat16* a, const __nv_bfloat16* bt, float* d) {
    wgmma_product_kernel<<<1, 128, kProductSmem>>>(a, bt, d, passes);
  });
}

TEST(WgmmaProduct, SwizzledKMajorTilesMatchTheHostProduct) {
  SKIP_WITHOUT_GPU();
  run_threads_swizzled(1);
}

TEST(WgmmaProduct, AccumulateFlagAddsASecondPass) {
  SKIP_WITHOUT_GPU();
  run_threads_swizzled(2);
}

TEST(WgmmaProduct, BulkCopiesWithThe128ByteSwizzleFeedTheDescriptors) {
  SKIP_WITHOUT_GPU();
  bool encoded = true;
  check_product(kRows, kK, 1, [&](const __nv_bfloat16* a, const __nv_bfloat16* bt, float* d) {
    TileMaps maps;
    encoded = encode_tile(&maps.a, a) && encode_tile(&maps.bt, bt);
    if (encoded) wgmma_tma_product_kernel<<<1, 128, kProductSmem>>>(maps, d);
  });
  EXPECT_TRUE(encoded) << "the driver refused a swizzled tile map";
}

TEST(WgmmaProduct, SlabShapeAcrossTwoSwizzledTilesAlongK) {
  SKIP_WITHOUT_GPU();
  check_product(16, 128, 1, [](const __nv_bfloat16* a, const __nv_bfloat16* bt, float* d) {
    wgmma_slab_product_kernel<<<1, 128, 2 * (kRows + 16) * 128 + 1024>>>(a, bt, d);
  });
}

TEST(WgmmaProduct, HalfSlabN8FromTheSecondSwizzlePeriod) {
  SKIP_WITHOUT_GPU();
  check_product(8, 128, 1, [](const __nv_bfloat16* a, const __nv_bfloat16* bt, float* d) {
    wgmma_half_slab_kernel<<<1, 128, 2 * (kRows + 16) * 128 + 1024>>>(a, bt, d);
  });
}

TEST(WgmmaTileMaps, The128ByteSwizzleTakesBoxRowsOfAtMost128Bytes) {
  alignas(16) static unsigned char host_bytes[64];  // never read
  const uint64_t dims[4] = {256, 1, 64, 1};
  const uint64_t strides[3] = {512, 512, 32768};
  using kda::cuda::tile_map_supported;
  using kda::cuda::TileSwizzle;
  EXPECT_TRUE(
      tile_map_supported(host_bytes, 2, dims, strides, {64, 1, 64, 1}, TileSwizzle::bytes128));
  EXPECT_TRUE(
      tile_map_supported(host_bytes, 4, dims, strides, {32, 1, 64, 1}, TileSwizzle::bytes128));
  EXPECT_FALSE(
      tile_map_supported(host_bytes, 2, dims, strides, {72, 1, 64, 1}, TileSwizzle::bytes128))
      << "144-byte rows cannot take the 128-byte swizzle";
  EXPECT_TRUE(tile_map_supported(host_bytes, 2, dims, strides, {72, 1, 64, 1}))
      << "without a swizzle they can";
}

}  // namespace
