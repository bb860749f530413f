// GPU unit tests of the tensor-core (mma) path, building block by building block, so that one
// device run says which piece is wrong:
//   1. warp_mma in every operand layout the kernel uses (A row-major or transposed, B [n][k] or
//      [k][n], 1, 2 or 4 n8 tiles, offset origins) against float64 host products, with the C
//      fragment -> row-major store mapping checked on a poisoned output; the same for the float32
//      kernel's 3xTF32 warp_mma_tf32, with a bound only float32-level accuracy meets;
//   2. copy_tile_async: zero fill of rows >= valid and of a partial 16-byte chunk;
//   3. the h/dh slab pipeline (issue_slab + slab_prepare): the 16-bit copy (transposed for
//      state_v_first with float32 h) and Σ_v S⊙dS, for every h dtype and layout;
//   4. the whole path (launch_sm80_mma) against the float64 cpu-ref on the configurations the
//      mma kernel takes, including those test_wy_cuda.cpp's matrix leaves to the general
//      kernel (state_v_first with V = 64/128, K != V, 16-byte-aligned padded strides);
//   5. bitwise determinism, and a timing print at the model shape.
// sm80_mma_supports is tested on the host and runs without a GPU; everything else skips then.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/common/mma_fragments.cuh"
#include "cuda/common/tf32_mma.cuh"
#include "cuda_unit_test.hpp"
#include "io/host_problem.hpp"
#include "kda/kda.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm80_mma/dispatch.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm80_mma/kernel.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm80_mma/traits.cuh"

namespace {

using kda::DType;
using kda::cuda::mma::ALayout;
using kda::cuda::mma::BLayout;
using kda::io::HostProblem;
using kda::io::HostTensor;
using kda::io::WyDqkgConfig;

// Device memory freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

template <typename T>
T to_x(float f) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(f);
  } else {
    return __float2half_rn(f);
  }
}
template <typename T>
float from_x(T x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(x);
  } else {
    return __half2float(x);
  }
}
template <typename T>
const char* x_name() {
  return std::is_same_v<T, __nv_bfloat16> ? "bf16" : "fp16";
}

// ---- 1. warp_mma in every layout ----------------------------------------------------------

constexpr int kOperandOffset = 8;  // the operand starts 8 rows and 8 columns into its tile

// One warp: copies the two tiles into shared memory, runs warp_mma from the offset origins and
// stores the 16 x 8 kNTiles result row-major from the C fragments.
template <typename T, ALayout kA, BLayout kB, int kKSteps, int kNTiles>
__global__ void warp_mma_kernel(const T* a_tile, int a_ld, int a_elems, const T* b_tile, int b_ld,
                                int b_elems, float* c) {
  __shared__ __align__(16) T sa[64 * 64];
  __shared__ __align__(16) T sb[64 * 64];
  const int lane = static_cast<int>(threadIdx.x);
  for (int e = lane; e < a_elems; e += 32) sa[e] = a_tile[e];
  for (int e = lane; e < b_elems; e += 32) sb[e] = b_tile[e];
  __syncwarp();
  float acc[kNTiles][4] = {};
  kda::cuda::mma::warp_mma<T, kA, kB, kKSteps, kNTiles>(
      acc, sa + kOperandOffset * a_ld + kOperandOffset, a_ld,
      sb + kOperandOffset * b_ld + kOperandOffset, b_ld, lane);
  constexpr int kN = 8 * kNTiles;
  const int g = lane / 4;
  const int t = lane % 4;
  for (int nt = 0; nt < kNTiles; ++nt) {
    const int col = 8 * nt + 2 * t;
    *reinterpret_cast<float2*>(c + g * kN + col) = make_float2(acc[nt][0], acc[nt][1]);
    *reinterpret_cast<float2*>(c + (g + 8) * kN + col) = make_float2(acc[nt][2], acc[nt][3]);
  }
}

template <typename T, ALayout kA, BLayout kB, int kNTiles>
void check_warp_mma(uint64_t seed) {
  constexpr int kKSteps = 2;
  constexpr int M = 16;
  constexpr int K = 16 * kKSteps;
  constexpr int N = 8 * kNTiles;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> a(M * K);
  std::vector<float> b(K * N);
  for (float& x : a) x = from_x(to_x<T>(normal(rng)));
  for (float& x : b) x = from_x(to_x<T>(normal(rng)));

  // Tiles as the kernel stores them: pitch = stored columns + 8, the operand at (8, 8).
  const int a_rows = (kA == ALayout::kMK ? M : K) + kOperandOffset;
  const int a_ld = (kA == ALayout::kMK ? K : M) + kOperandOffset + 8;
  const int b_rows = (kB == BLayout::kNK ? N : K) + kOperandOffset;
  const int b_ld = (kB == BLayout::kNK ? K : N) + kOperandOffset + 8;
  ASSERT_LE(a_rows * a_ld, 64 * 64);
  ASSERT_LE(b_rows * b_ld, 64 * 64);
  std::vector<T> a_tile(a_rows * a_ld, to_x<T>(1000.0f));  // never read: would show up
  std::vector<T> b_tile(b_rows * b_ld, to_x<T>(1000.0f));
  for (int m = 0; m < M; ++m) {
    for (int k = 0; k < K; ++k) {
      const int r = kA == ALayout::kMK ? m : k;
      const int col = kA == ALayout::kMK ? k : m;
      a_tile[(r + kOperandOffset) * a_ld + col + kOperandOffset] = to_x<T>(a[m * K + k]);
    }
  }
  for (int k = 0; k < K; ++k) {
    for (int n = 0; n < N; ++n) {
      const int r = kB == BLayout::kNK ? n : k;
      const int col = kB == BLayout::kNK ? k : n;
      b_tile[(r + kOperandOffset) * b_ld + col + kOperandOffset] = to_x<T>(b[k * N + n]);
    }
  }
  DeviceBuffer d_a(a_tile.size() * sizeof(T));
  DeviceBuffer d_b(b_tile.size() * sizeof(T));
  DeviceBuffer d_c(M * N * sizeof(float));
  ASSERT_CUDA(cudaMemcpy(d_a.get(), a_tile.data(), d_a.bytes(), cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpy(d_b.get(), b_tile.data(), d_b.bytes(), cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemset(d_c.get(), 0xff, d_c.bytes()));  // NaN poison
  warp_mma_kernel<T, kA, kB, kKSteps, kNTiles>
      <<<1, 32>>>(d_a.get<T>(), a_ld, static_cast<int>(a_tile.size()), d_b.get<T>(), b_ld,
                  static_cast<int>(b_tile.size()), d_c.get<float>());
  ASSERT_CUDA(cudaGetLastError());
  std::vector<float> c(M * N);
  ASSERT_CUDA(cudaMemcpy(c.data(), d_c.get(), d_c.bytes(), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double ref = 0.0;
      for (int k = 0; k < K; ++k) ref += static_cast<double>(a[m * K + k]) * b[k * N + n];
      const float got = c[m * N + n];
      // float32 accumulation of 32 exact products: errors ~1e-6; a layout error is O(1).
      if (!(std::fabs(got - ref) <= 1e-4 * (1.0 + std::fabs(ref)))) {
        if (++bad <= 5) {
          ADD_FAILURE() << x_name<T>() << " A " << (kA == ALayout::kMK ? "[m][k]" : "[k][m]")
                        << " B " << (kB == BLayout::kNK ? "[n][k]" : "[k][n]") << " tiles "
                        << kNTiles << ": C[" << m << "][" << n << "] = " << got << ", expected "
                        << ref;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << "wrong elements of " << M * N;
}

template <typename T>
void check_all_layouts() {
  uint64_t seed = 1;
  check_warp_mma<T, ALayout::kMK, BLayout::kNK, 1>(seed++);
  check_warp_mma<T, ALayout::kMK, BLayout::kNK, 2>(seed++);
  check_warp_mma<T, ALayout::kMK, BLayout::kNK, 4>(seed++);
  check_warp_mma<T, ALayout::kMK, BLayout::kKN, 1>(seed++);
  check_warp_mma<T, ALayout::kMK, BLayout::kKN, 2>(seed++);
  check_warp_mma<T, ALayout::kKM, BLayout::kKN, 1>(seed++);
  check_warp_mma<T, ALayout::kKM, BLayout::kKN, 2>(seed++);
  check_warp_mma<T, ALayout::kKM, BLayout::kKN, 4>(seed++);
  check_warp_mma<T, ALayout::kKM, BLayout::kNK, 1>(seed++);
  check_warp_mma<T, ALayout::kKM, BLayout::kNK, 2>(seed++);
}

TEST(CudaFastUnits, WarpMmaAllLayoutsBf16) {
  SKIP_WITHOUT_GPU();
  check_all_layouts<__nv_bfloat16>();
}

TEST(CudaFastUnits, WarpMmaAllLayoutsFp16) {
  SKIP_WITHOUT_GPU();
  check_all_layouts<__half>();
}

// ---- 1b. warp_mma_tf32 (3xTF32, float32 operands) in every layout --------------------------

// One warp: copies the two float32 tiles into shared memory, runs the 3xTF32 warp_mma_tf32 (or,
// kPaired, warp_mma_tf32_k16: the k-paired 128-bit loads) from the offset origins and stores the
// 16 x 8 kNTiles result row-major from the C fragments.
template <ALayout kA, BLayout kB, int kKSteps, int kNTiles, bool kPaired>
__global__ void warp_mma_tf32_kernel(const float* a_tile, int a_ld, int a_elems,
                                     const float* b_tile, int b_ld, int b_elems, float* c) {
  __shared__ __align__(16) float sa[48 * 48];
  __shared__ __align__(16) float sb[48 * 48];
  const int lane = static_cast<int>(threadIdx.x);
  for (int e = lane; e < a_elems; e += 32) sa[e] = a_tile[e];
  for (int e = lane; e < b_elems; e += 32) sb[e] = b_tile[e];
  __syncwarp();
  float acc[kNTiles][4] = {};
  if constexpr (kPaired) {
    static_assert(kA == ALayout::kMK, "the k-paired loads take A [m][k]");
    kda::cuda::mma::warp_mma_tf32_k16<kB, kKSteps, kNTiles>(
        acc, sa + kOperandOffset * a_ld + kOperandOffset, a_ld,
        sb + kOperandOffset * b_ld + kOperandOffset, b_ld, lane);
  } else {
    kda::cuda::mma::warp_mma_tf32<kA, kB, kKSteps, kNTiles>(
        acc, sa + kOperandOffset * a_ld + kOperandOffset, a_ld,
        sb + kOperandOffset * b_ld + kOperandOffset, b_ld, lane);
  }
  constexpr int kN = 8 * kNTiles;
  const int g = lane / 4;
  const int t = lane % 4;
  for (int nt = 0; nt < kNTiles; ++nt) {
    const int col = 8 * nt + 2 * t;
    *reinterpret_cast<float2*>(c + g * kN + col) = make_float2(acc[nt][0], acc[nt][1]);
    *reinterpret_cast<float2*>(c + (g + 8) * kN + col) = make_float2(acc[nt][2], acc[nt][3]);
  }
}

// Full float32 operands (not TF32-representable): the 3xTF32 product must be within 2e-6 of the
// float64 one relative to Σ|a||b| (its error is about 2^-21 of that; plain TF32's, 2^-11, and a
// layout error, O(1), are far above). kPaired: the k-paired loads (warp_mma_tf32_k16), which pair
// each physical k of A with the same of B in another order; a mismatch (a permuted A against an
// unpermuted B) is an O(1) error.
template <ALayout kA, BLayout kB, int kNTiles, bool kPaired = false>
void check_warp_mma_tf32(uint64_t seed) {
  constexpr int kKSteps = 4;
  constexpr int M = 16;
  constexpr int K = 8 * kKSteps;
  constexpr int N = 8 * kNTiles;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> a(M * K);
  std::vector<float> b(K * N);
  for (float& x : a) x = normal(rng);
  for (float& x : b) x = normal(rng);

  // Tiles as the kernel stores them: pitch = stored columns + offset + 4, the operand at (8, 8)
  // (16-byte aligned rows and origin, as the 128-bit loads need).
  const int a_rows = (kA == ALayout::kMK ? M : K) + kOperandOffset;
  const int a_ld = (kA == ALayout::kMK ? K : M) + kOperandOffset + 4;
  const int b_rows = (kB == BLayout::kNK ? N : K) + kOperandOffset;
  const int b_ld = (kB == BLayout::kNK ? K : N) + kOperandOffset + 4;
  ASSERT_LE(a_rows * a_ld, 48 * 48);
  ASSERT_LE(b_rows * b_ld, 48 * 48);
  std::vector<float> a_tile(a_rows * a_ld, 1000.0f);  // never read: would show up
  std::vector<float> b_tile(b_rows * b_ld, 1000.0f);
  for (int m = 0; m < M; ++m) {
    for (int k = 0; k < K; ++k) {
      const int r = kA == ALayout::kMK ? m : k;
      const int col = kA == ALayout::kMK ? k : m;
      a_tile[(r + kOperandOffset) * a_ld + col + kOperandOffset] = a[m * K + k];
    }
  }
  for (int k = 0; k < K; ++k) {
    for (int n = 0; n < N; ++n) {
      const int r = kB == BLayout::kNK ? n : k;
      const int col = kB == BLayout::kNK ? k : n;
      b_tile[(r + kOperandOffset) * b_ld + col + kOperandOffset] = b[k * N + n];
    }
  }
  DeviceBuffer d_a(a_tile.size() * sizeof(float));
  DeviceBuffer d_b(b_tile.size() * sizeof(float));
  DeviceBuffer d_c(M * N * sizeof(float));
  ASSERT_CUDA(cudaMemcpy(d_a.get(), a_tile.data(), d_a.bytes(), cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpy(d_b.get(), b_tile.data(), d_b.bytes(), cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemset(d_c.get(), 0xff, d_c.bytes()));  // NaN poison
  warp_mma_tf32_kernel<kA, kB, kKSteps, kNTiles, kPaired>
      <<<1, 32>>>(d_a.get<float>(), a_ld, static_cast<int>(a_tile.size()), d_b.get<float>(), b_ld,
                  static_cast<int>(b_tile.size()), d_c.get<float>());
  ASSERT_CUDA(cudaGetLastError());
  std::vector<float> c(M * N);
  ASSERT_CUDA(cudaMemcpy(c.data(), d_c.get(), d_c.bytes(), cudaMemcpyDeviceToHost));
  int bad = 0;
  double worst = 0.0;  // largest |error| / Σ|a||b|
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double ref = 0.0;
      double magnitude = 0.0;
      for (int k = 0; k < K; ++k) {
        const double p = static_cast<double>(a[m * K + k]) * b[k * N + n];
        ref += p;
        magnitude += std::fabs(p);
      }
      const float got = c[m * N + n];
      const double rel = std::fabs(got - ref) / magnitude;
      worst = std::max(worst, rel);
      if (!(rel <= 2e-6)) {
        if (++bad <= 5) {
          ADD_FAILURE() << "tf32x3" << (kPaired ? " k-paired" : "") << " A "
                        << (kA == ALayout::kMK ? "[m][k]" : "[k][m]") << " B "
                        << (kB == BLayout::kNK ? "[n][k]" : "[k][n]") << " tiles " << kNTiles
                        << ": C[" << m << "][" << n << "] = " << got << ", expected " << ref;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << "wrong elements of " << M * N;
  std::printf("    %sA %s B %s x%d: worst |error| / sum|a||b| = %.2e\n", kPaired ? "k-paired " : "",
              kA == ALayout::kMK ? "[m][k]" : "[k][m]", kB == BLayout::kNK ? "[n][k]" : "[k][n]",
              kNTiles, worst);
}

TEST(CudaFastUnits, WarpMmaTf32x3AllLayouts) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 101;
  check_warp_mma_tf32<ALayout::kMK, BLayout::kNK, 1>(seed++);
  check_warp_mma_tf32<ALayout::kMK, BLayout::kNK, 2>(seed++);
  check_warp_mma_tf32<ALayout::kMK, BLayout::kNK, 4>(seed++);
  check_warp_mma_tf32<ALayout::kMK, BLayout::kKN, 1>(seed++);
  check_warp_mma_tf32<ALayout::kMK, BLayout::kKN, 2>(seed++);
  check_warp_mma_tf32<ALayout::kKM, BLayout::kKN, 1>(seed++);
  check_warp_mma_tf32<ALayout::kKM, BLayout::kKN, 4>(seed++);
  check_warp_mma_tf32<ALayout::kKM, BLayout::kNK, 2>(seed++);
  // The k-paired 128-bit loads (A [m][k] only; B [k][n] by 32-bit loads of the paired rows).
  check_warp_mma_tf32<ALayout::kMK, BLayout::kNK, 1, true>(seed++);
  check_warp_mma_tf32<ALayout::kMK, BLayout::kNK, 2, true>(seed++);
  check_warp_mma_tf32<ALayout::kMK, BLayout::kNK, 4, true>(seed++);
  check_warp_mma_tf32<ALayout::kMK, BLayout::kKN, 1, true>(seed++);
  check_warp_mma_tf32<ALayout::kMK, BLayout::kKN, 2, true>(seed++);
}

// ---- 2. copy_tile_async ------------------------------------------------------------------

template <int kRows, int kCols, int kThreads>
__global__ void copy_tile_kernel(const __nv_bfloat16* src, int64_t src_stride, int valid_rows,
                                 int valid_cols, __nv_bfloat16* out) {
  constexpr int kLd = kCols + 8;
  __shared__ __align__(16) __nv_bfloat16 tile[kRows * kLd];
  const int tid = static_cast<int>(threadIdx.x);
  for (int e = tid; e < kRows * kLd; e += kThreads) tile[e] = __float2bfloat16_rn(-777.0f);
  __syncthreads();
  kda::cuda::copy_tile_async<kRows, kCols, kThreads>(tile, kLd, src, src_stride, valid_rows,
                                                     valid_cols, tid);
  kda::cuda::mma::cp_async_commit();
  kda::cuda::mma::cp_async_wait<0>();
  __syncthreads();
  for (int e = tid; e < kRows * kCols; e += kThreads) {
    out[e] = tile[(e / kCols) * kLd + e % kCols];
  }
}

template <int kThreads>
void check_copy_tile(int valid_rows, int valid_cols) {
  constexpr int kRows = 16;
  constexpr int kCols = 32;
  constexpr int kStride = 48;  // source rows 96 bytes apart
  std::vector<__nv_bfloat16> src(kRows * kStride);
  for (size_t i = 0; i < src.size(); ++i) src[i] = __float2bfloat16_rn(static_cast<float>(i % 251));
  DeviceBuffer d_src(src.size() * 2);
  DeviceBuffer d_out(kRows * kCols * 2);
  ASSERT_CUDA(cudaMemcpy(d_src.get(), src.data(), d_src.bytes(), cudaMemcpyHostToDevice));
  copy_tile_kernel<kRows, kCols, kThreads><<<1, kThreads>>>(
      d_src.get<__nv_bfloat16>(), kStride, valid_rows, valid_cols, d_out.get<__nv_bfloat16>());
  ASSERT_CUDA(cudaGetLastError());
  std::vector<__nv_bfloat16> out(kRows * kCols);
  ASSERT_CUDA(cudaMemcpy(out.data(), d_out.get(), d_out.bytes(), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kCols; ++c) {
      const float want =
          r < valid_rows && c < valid_cols ? __bfloat162float(src[r * kStride + c]) : 0.0f;
      const float got = __bfloat162float(out[r * kCols + c]);
      if (got != want && ++bad <= 5) {
        ADD_FAILURE() << kThreads << " threads, valid " << valid_rows << " x " << valid_cols
                      << ": tile[" << r << "][" << c << "] = " << got << ", expected " << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(CudaFastUnits, CopyTileZeroFillsRowsAndPartialChunks) {
  SKIP_WITHOUT_GPU();
  check_copy_tile<64>(16, 32);  // full tile, one chunk per thread
  check_copy_tile<64>(11, 13);  // short rows and a 5-element (10-byte) chunk
  check_copy_tile<128>(1, 1);   // more threads than chunks
  check_copy_tile<32>(7, 24);   // two chunks per thread, chunk-aligned column limit
}

// ---- 3. the h/dh slab pipeline -----------------------------------------------------------

// Copies slab k0 of h/dh (one matrix [K][V] or [V][K] at the given strides), prepares it, and
// writes back the 16-bit copies (S then dS, [kSlabXRows][kSlabXLd] each, pad included) and
// Σ_v S⊙dS summed over the parts.
template <typename Tr>
__global__ void slab_kernel(kda::cuda::WyDqkgParams p, kda::cuda::LoopStrides st, int k0,
                            typename Tr::XT* slab_out, float* sds_out) {
  using XT = typename Tr::XT;
  using HT = typename Tr::HT;
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kStageBytes = Tr::kStateF32 ? 2 * Tr::kSlabRows * Tr::kSlabCols * 4 : 0;
  float* stage = reinterpret_cast<float*>(smem);
  XT* slab_S = reinterpret_cast<XT*>(smem + kStageBytes);
  XT* slab_dS = reinterpret_cast<XT*>(smem + kStageBytes + Tr::kSlabXBytes);
  float* sds = reinterpret_cast<float*>(smem + kStageBytes + 2 * Tr::kSlabXBytes);
  const int tid = static_cast<int>(threadIdx.x);
  constexpr int kSlabXElems = Tr::kSlabXRows * Tr::kSlabXLd;
  for (int e = tid; e < kSlabXElems; e += Tr::kThreads) {
    slab_S[e] = kda::cuda::from_float<XT>(-999.0f);
    slab_dS[e] = kda::cuda::from_float<XT>(-999.0f);
  }
  __syncthreads();
  const kda::cuda::UnitOrigins o{};
  if constexpr (Tr::kStateF32) {
    // kSlabK rows of the 16-bit copy from copies of kCopyK rows (two halves with slab pairs).
    for (int row0 = 0; row0 < Tr::kSlabK; row0 += Tr::kCopyK) {
      kda::cuda::issue_slab<Tr, Tr::kSlabCols>(p, o, st, k0 + row0, stage,
                                               stage + Tr::kSlabRows * Tr::kSlabCols, tid);
      kda::cuda::mma::cp_async_commit();
      kda::cuda::mma::cp_async_wait<0>();
      kda::cuda::slab_prepare<Tr>(stage, stage + Tr::kSlabRows * Tr::kSlabCols, slab_S, slab_dS,
                                  sds, row0, tid);
    }
  } else {
    kda::cuda::issue_slab<Tr, Tr::kSlabXLd>(p, o, st, k0, reinterpret_cast<HT*>(slab_S),
                                            reinterpret_cast<HT*>(slab_dS), tid);
    kda::cuda::mma::cp_async_commit();
    kda::cuda::mma::cp_async_wait<0>();
    kda::cuda::slab_prepare<Tr>(nullptr, nullptr, slab_S, slab_dS, sds, 0, tid);
  }
  __syncthreads();
  for (int e = tid; e < kSlabXElems; e += Tr::kThreads) {
    slab_out[e] = slab_S[e];
    slab_out[kSlabXElems + e] = slab_dS[e];
  }
  if (tid < Tr::kSlabK) {
    // Row k's sum lives at sds_pos(k): k itself, or its slab position with quad columns (what
    // the epilogues read).
    const int at = kda::cuda::wy::sds_pos<Tr>(tid);
    float sum = 0.0f;
    for (int part = 0; part < Tr::kSdsParts; ++part) sum += sds[part * Tr::kSlabK + at];
    sds_out[tid] = sum;
  }
}

template <typename XT, typename HT, int kBT, int kV, bool kVFirst>
void check_slab() {
  using Tr = kda::cuda::WyDqkgMmaTraits<XT, HT, kBT, kV, kVFirst>;
  constexpr int K = 64;
  constexpr int k0 = 16;  // the second slab: exercises the k offset
  // h stored [K][V] (or [V][K]) with rows padded by 8 elements (32 or 16 bytes: still aligned).
  const int rows = kVFirst ? kV : K;
  const int cols = kVFirst ? K : kV;
  const int ld = cols + 8;
  std::mt19937_64 rng(kBT * 1000 + kV + (kVFirst ? 7 : 0));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<HT> h(rows * ld), dh(rows * ld);
  for (int i = 0; i < rows * ld; ++i) {
    if constexpr (std::is_same_v<HT, float>) {
      h[i] = normal(rng);
      dh[i] = normal(rng);
    } else {
      h[i] = to_x<HT>(normal(rng));
      dh[i] = to_x<HT>(normal(rng));
    }
  }
  auto value = [&](const std::vector<HT>& m, int k, int v) -> double {
    const HT x = kVFirst ? m[v * ld + k] : m[k * ld + v];
    if constexpr (std::is_same_v<HT, float>) {
      return x;
    } else {
      return from_x(x);
    }
  };
  DeviceBuffer d_h(h.size() * sizeof(HT));
  DeviceBuffer d_dh(dh.size() * sizeof(HT));
  ASSERT_CUDA(cudaMemcpy(d_h.get(), h.data(), d_h.bytes(), cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpy(d_dh.get(), dh.data(), d_dh.bytes(), cudaMemcpyHostToDevice));
  kda::cuda::WyDqkgParams p;
  p.h.data = d_h.get();
  p.dh.data = d_dh.get();
  kda::cuda::LoopStrides st{};
  st.h_k = st.dh_k = kVFirst ? 1 : ld;
  st.h_v = st.dh_v = kVFirst ? ld : 1;
  constexpr int kSlabXElems = Tr::kSlabXRows * Tr::kSlabXLd;
  DeviceBuffer d_slab(2 * kSlabXElems * sizeof(XT));
  DeviceBuffer d_sds(Tr::kSlabK * sizeof(float));
  const int smem = (Tr::kStateF32 ? 2 * Tr::kSlabRows * Tr::kSlabCols * 4 : 0) +
                   2 * Tr::kSlabXBytes + Tr::kSdsParts * Tr::kSlabK * 4;
  ASSERT_CUDA(
      cudaFuncSetAttribute(slab_kernel<Tr>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  slab_kernel<Tr><<<1, Tr::kThreads, smem>>>(p, st, k0, d_slab.get<XT>(), d_sds.get<float>());
  ASSERT_CUDA(cudaGetLastError());
  std::vector<XT> slab(2 * kSlabXElems);
  std::vector<float> sds(Tr::kSlabK);
  ASSERT_CUDA(cudaMemcpy(slab.data(), d_slab.get(), d_slab.bytes(), cudaMemcpyDeviceToHost));
  ASSERT_CUDA(cudaMemcpy(sds.data(), d_sds.get(), d_sds.bytes(), cudaMemcpyDeviceToHost));
  const std::string what =
      std::string(x_name<XT>()) + (std::is_same_v<HT, float> ? " h=f32" : " h=x") +
      " BT=" + std::to_string(kBT) + " V=" + std::to_string(kV) + (kVFirst ? " state_v_first" : "");
  int bad = 0;
  for (int kl = 0; kl < Tr::kSlabK; ++kl) {
    double ref = 0.0;
    for (int v = 0; v < kV; ++v) {
      ref += value(h, k0 + kl, v) * value(dh, k0 + kl, v);
      // The 16-bit copy: k-first [kl][v] (128-byte swizzled with the wgmma loop) or, as stored,
      // [v][kl]; exactly the rounded values.
      const int at = Tr::kSlabXKFirst ? Tr::slab_x_index(kl, v) : Tr::slab_x_index(v, kl);
      const float want_s = from_x(to_x<XT>(static_cast<float>(value(h, k0 + kl, v))));
      const float want_ds = from_x(to_x<XT>(static_cast<float>(value(dh, k0 + kl, v))));
      if ((from_x(slab[at]) != want_s || from_x(slab[kSlabXElems + at]) != want_ds) && ++bad <= 5) {
        ADD_FAILURE() << what << ": 16-bit slab (k " << kl << ", v " << v << ") = ("
                      << from_x(slab[at]) << ", " << from_x(slab[kSlabXElems + at])
                      << "), expected (" << want_s << ", " << want_ds << ")";
      }
    }
    if (!(std::fabs(sds[kl] - ref) <= 1e-5 * (std::fabs(ref) + std::sqrt(kV))) && ++bad <= 5) {
      ADD_FAILURE() << what << ": Σ S⊙dS[" << kl << "] = " << sds[kl] << ", expected " << ref;
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(CudaFastUnits, SlabConversionAndSumFloat32State) {
  SKIP_WITHOUT_GPU();
  check_slab<__nv_bfloat16, float, 64, 128, false>();
  check_slab<__nv_bfloat16, float, 64, 128, true>();
  check_slab<__half, float, 32, 64, false>();
  check_slab<__half, float, 32, 64, true>();
  check_slab<__nv_bfloat16, float, 16, 128, true>();
}

TEST(CudaFastUnits, SlabSumXState) {
  SKIP_WITHOUT_GPU();
  check_slab<__nv_bfloat16, __nv_bfloat16, 64, 128, false>();
  check_slab<__nv_bfloat16, __nv_bfloat16, 64, 128, true>();
  check_slab<__half, __half, 64, 64, false>();  // 128 chunks for 256 threads: idle warps
  check_slab<__half, __half, 64, 64, true>();
  check_slab<__half, __half, 16, 128, false>();
}

// ---- 4. the whole path against cpu-ref ---------------------------------------------------

// One device tensor; `pad` extra elements after each row of the last dimension.
struct DeviceTensor {
  std::unique_ptr<DeviceBuffer> buffer;
  kda::TensorView view;
};

DeviceTensor upload(const HostTensor& t, int64_t pad) {
  DeviceTensor d;
  const auto item = static_cast<int64_t>(kda::dtype_size(t.dtype));
  const int64_t row = t.shape.empty() ? 1 : t.shape.back();
  const int64_t rows = row == 0 ? 0 : t.numel() / row;
  const int64_t ld = row + pad;
  d.buffer = std::make_unique<DeviceBuffer>(static_cast<size_t>(rows * ld * item));
  if (rows > 0) {
    cudaMemcpy2D(d.buffer->get(), ld * item, t.bytes.data(), row * item, row * item, rows,
                 cudaMemcpyHostToDevice);
  }
  d.view = t.view({kda::DeviceType::cuda, 0});
  d.view.data = d.buffer->get();
  int64_t stride = 1;
  for (int dim = d.view.rank - 1; dim >= 0; --dim) {
    d.view.strides[dim] = stride;
    stride *= dim == d.view.rank - 1 ? ld : d.view.shape[dim];
  }
  return d;
}

struct DeviceRun {
  std::vector<DeviceTensor> tensors;
  kda::ChunkBwdWyDqkgProblem problem;
  kda::ChunkBwdWyDqkgDims dims;
};

// The device problem of `hp`, the inputs in `padded` stored with rows 8 elements longer (16
// bytes for X, 32 for float32: the mma path still takes them); outputs poisoned with NaN.
void make_device_problem(const HostProblem& hp, const std::set<std::string>& padded,
                         DeviceRun* run) {
  run->problem = hp.as<kda::ChunkBwdWyDqkgProblem>();
  for (const auto& arg : kda::ChunkBwdWyDqkgProblem::args()) {
    const std::string name = arg.info.name;
    if (!hp.has(name)) continue;
    run->tensors.push_back(upload(hp.get(name), padded.count(name) != 0 ? 8 : 0));
    arg.of(run->problem) = run->tensors.back().view;
  }
}

// NaN in every output byte, finished before returning: the kernel runs on a non-blocking stream,
// which does not wait for the legacy stream's memsets (once, under load on a shared GPU, a
// kernel ran before them and its outputs were overwritten with the poison).
void poison_outputs(const DeviceRun& run) {
  for (const auto& arg : kda::ChunkBwdWyDqkgProblem::args()) {
    if (arg.info.role != kda::ArgRole::output) continue;
    const kda::TensorView* out = &arg.of(run.problem);
    ASSERT_EQ(cudaMemset(out->data, 0xff,
                         static_cast<size_t>(out->numel()) * kda::dtype_size(out->dtype)),
              cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

HostTensor download(const kda::TensorView& view, const HostTensor& like) {
  HostTensor t = like;
  cudaMemcpy(t.bytes.data(), view.data, t.bytes.size(), cudaMemcpyDeviceToHost);
  return t;
}

struct FastCase {
  std::string name;
  WyDqkgConfig config;
  std::set<std::string> padded = {};
};

// Printed by its name (gtest would print a hex dump of the struct in every test listing and skip
// line).
void PrintTo(const FastCase& c, std::ostream* out) {
  *out << c.name;
}

WyDqkgConfig small(DType x, DType h, int64_t BT, int64_t K, int64_t V) {
  WyDqkgConfig c;
  c.B = 2;
  c.T = 3 * BT + 5;  // full chunks and a short tail
  c.H = 2;
  c.K = K;
  c.V = V;
  c.BT = BT;
  c.x_dtype = x;
  c.h_dtype = h;
  c.beta_dtype = x;
  return c;
}

std::string tag(DType d) {
  return d == DType::f16 ? "fp16" : d == DType::bf16 ? "bf16" : "fp32";
}

std::vector<FastCase> fast_cases() {
  std::vector<FastCase> cases;
  for (DType x : {DType::f16, DType::bf16, DType::f32}) {
    // h in float32, and in X where that differs (float32 X: the 3xTF32 kernel).
    const std::vector<DType> hs =
        x == DType::f32 ? std::vector<DType>{DType::f32} : std::vector<DType>{DType::f32, x};
    for (DType h : hs) {
      const std::string hn = h == DType::f32 ? "_hfp32" : "_hx";
      for (int64_t bt : {16, 32, 64}) {
        for (auto [K, V] :
             {std::pair<int64_t, int64_t>{64, 64}, {128, 128}, {64, 128}, {128, 64}}) {
          for (bool svf : {false, true}) {
            WyDqkgConfig c = small(x, h, bt, K, V);
            c.state_v_first = svf;
            c.seed = static_cast<uint64_t>(bt * 7 + K + V * 3 + (svf ? 1 : 0));
            cases.push_back({tag(x) + hn + "_bt" + std::to_string(bt) + "_k" + std::to_string(K) +
                                 "_v" + std::to_string(V) + (svf ? "_svf" : ""),
                             c});
          }
        }
      }
    }
    // beta float32, GVA, varlen with and without chunk indices, padded strides, scale.
    WyDqkgConfig b = small(x, DType::f32, 64, 128, 128);
    b.beta_dtype = DType::f32;
    b.seed = 11;
    cases.push_back({tag(x) + "_beta_fp32", b});
    for (int64_t ratio : {2, 4}) {
      WyDqkgConfig g = small(x, DType::f32, 64, 128, 128);
      g.H = 2;
      g.HV = 2 * ratio;
      g.seed = 12 + ratio;
      cases.push_back({tag(x) + "_gva_x" + std::to_string(ratio), g});
    }
    for (int64_t bt : {16, 32, 64}) {
      for (bool given : {false, true}) {
        WyDqkgConfig v = small(x, x, bt, 128, 64);
        v.B = 1;
        v.HV = 4;
        v.seqlens = {1, bt - 3, bt, 4 * bt + 7, 1, 2 * bt};
        v.T = 0;
        for (int64_t n : v.seqlens) v.T += n;
        v.pass_chunk_indices = given;
        v.seed = 20 + bt + (given ? 1 : 0);
        cases.push_back(
            {tag(x) + "_varlen_bt" + std::to_string(bt) + (given ? "_indices" : "_derived"), v});
      }
    }
    WyDqkgConfig s = small(x, DType::f32, 32, 64, 128);
    s.scale = 0.3;
    s.state_v_first = true;
    s.seed = 30;
    cases.push_back({tag(x) + "_strided",
                     s,
                     {"q", "k", "v", "v_new", "g", "A", "h", "do", "dh", "dv", "beta"}});
    // A model-like slice: K = V = 128, BT = 64, 4 heads, 4 chunks.
    WyDqkgConfig m = small(x, DType::f32, 64, 128, 128);
    m.B = 1;
    m.T = 256;
    m.H = 4;
    m.seed = 31;
    cases.push_back({tag(x) + "_model_slice", m});
  }
  return cases;
}

class CudaFastPath : public ::testing::TestWithParam<FastCase> {};

TEST_P(CudaFastPath, MatchesFloat64Reference) {
  SKIP_WITHOUT_GPU();
  const FastCase& fc = GetParam();
  HostProblem hp = kda::io::make_random_problem(fc.config);
  HostProblem ref = hp;
  const kda::Status ref_status =
      kda::run(ref.as<kda::ChunkBwdWyDqkgProblem>(), kda::Backend::cpu_ref);
  ASSERT_TRUE(ref_status.ok()) << ref_status.message;

  DeviceRun run;
  make_device_problem(hp, fc.padded, &run);
  const kda::Status valid = run.problem.validate(&run.dims);
  ASSERT_TRUE(valid.ok()) << valid.message;
  ASSERT_TRUE(kda::detail::sm80_mma_supports(run.problem, run.dims))
      << "the mma path must take this case";
  poison_outputs(run);
  cudaStream_t stream;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const kda::Status s = kda::detail::launch_sm80_mma(run.problem, run.dims, stream, 0);
  ASSERT_TRUE(s.ok()) << s.message;
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  ASSERT_CUDA(cudaStreamDestroy(stream));

  const double bar = kda::io::pass_bar(fc.config.x_dtype);
  for (const auto& arg : kda::ChunkBwdWyDqkgProblem::args()) {
    if (arg.info.role != kda::ArgRole::output) continue;
    const std::string name = arg.info.name;
    const HostTensor got = download(arg.of(run.problem), ref.get(name));
    int64_t unwritten = 0;
    for (int64_t i = 0; i < got.numel(); ++i) unwritten += std::isnan(got.at(i)) ? 1 : 0;
    EXPECT_EQ(unwritten, 0) << name << ": " << unwritten << " elements left poisoned";
    const double err = kda::io::err_ratio(got, ref.get(name));
    EXPECT_LE(err, bar) << name << " err_ratio " << err << " above the bar " << bar;
    std::printf("    %-10s err_ratio %.3e (bar %.0e)\n", name.c_str(), err, bar);
  }
}

std::string fast_case_name(const ::testing::TestParamInfo<FastCase>& param_info) {
  return param_info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Configs, CudaFastPath, ::testing::ValuesIn(fast_cases()), fast_case_name);

// ---- 5. determinism and timing -----------------------------------------------------------

TEST(CudaFastUnits, BitwiseDeterministic) {
  SKIP_WITHOUT_GPU();
  WyDqkgConfig c = small(DType::bf16, DType::f32, 64, 128, 128);
  c.B = 1;
  c.T = 1000;
  c.H = 4;
  c.HV = 8;
  c.seed = 5;
  const HostProblem hp = kda::io::make_random_problem(c);
  DeviceRun run;
  make_device_problem(hp, {}, &run);
  ASSERT_TRUE(run.problem.validate(&run.dims).ok());
  std::vector<std::vector<uint8_t>> first;
  for (int rep = 0; rep < 5; ++rep) {
    poison_outputs(run);
    ASSERT_TRUE(kda::detail::launch_sm80_mma(run.problem, run.dims, nullptr, 0).ok());
    ASSERT_CUDA(cudaDeviceSynchronize());
    size_t index = 0;
    for (const auto& arg : kda::ChunkBwdWyDqkgProblem::args()) {
      if (arg.info.role != kda::ArgRole::output) continue;
      const HostTensor got = download(arg.of(run.problem), hp.get(arg.info.name));
      if (rep == 0) {
        first.push_back(got.bytes);
      } else {
        ASSERT_EQ(got.bytes, first[index]) << arg.info.name << " differs in run " << rep;
      }
      ++index;
    }
  }
}

// Prints the median time at the model shape (B=1, T=2048, H=32, K=V=128, BT=64), with the
// bytes, the floor at 4.27 TB/s and fla's time from SPEC.md. No pass bar: a measurement.
TEST(CudaFastUnits, ModelShapeTiming) {
  SKIP_WITHOUT_GPU();
  for (auto [x, h] : {std::pair{DType::bf16, DType::f32},
                      {DType::f16, DType::f32},
                      {DType::bf16, DType::bf16},
                      {DType::f32, DType::f32}}) {
    WyDqkgConfig c;
    c.x_dtype = x;
    c.h_dtype = h;
    c.beta_dtype = x;
    c.seed = 3;
    const HostProblem hp = kda::io::make_random_problem(c);
    DeviceRun run;
    make_device_problem(hp, {}, &run);
    ASSERT_TRUE(run.problem.validate(&run.dims).ok());
    double bytes = 0;
    for (const auto& t : run.tensors) bytes += static_cast<double>(t.buffer->bytes());
    cudaEvent_t start, stop;
    ASSERT_CUDA(cudaEventCreate(&start));
    ASSERT_CUDA(cudaEventCreate(&stop));
    std::vector<float> ms;
    for (int rep = 0; rep < 30; ++rep) {
      ASSERT_CUDA(cudaEventRecord(start));
      ASSERT_TRUE(kda::detail::launch_sm80_mma(run.problem, run.dims, nullptr, 0).ok());
      ASSERT_CUDA(cudaEventRecord(stop));
      ASSERT_CUDA(cudaEventSynchronize(stop));
      float t = 0;
      ASSERT_CUDA(cudaEventElapsedTime(&t, start, stop));
      if (rep >= 5) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double us = 1000.0 * ms[ms.size() / 2];
    const double floor_us = bytes / 4.27e12 * 1e6;
    std::printf(
        "    model shape X=%s h=%s: %.1f us median, %.0f MB, floor %.1f us (%.0f%%), "
        "%.0f GB/s; fla: %s\n",
        tag(x).c_str(), tag(h).c_str(), us, bytes / 1e6, floor_us, 100.0 * floor_us / us,
        bytes / us / 1e3,
        x == DType::f32   ? "725 us (tf32)"
        : h == DType::f32 ? (x == DType::bf16 ? "357 us" : "361 us")
                          : "333 us");
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
}

// ---- sm80_mma_supports (host only) ------------------------------------------------------

TEST(CudaFastPathSupports, TakesAndRefuses) {
  auto check = [](const WyDqkgConfig& c, bool expected, const std::set<std::string>& misalign,
                  const char* what) {
    HostProblem hp = kda::io::make_random_problem(c);
    kda::ChunkBwdWyDqkgProblem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
    kda::ChunkBwdWyDqkgDims d;
    ASSERT_TRUE(p.validate(&d).ok()) << what;
    // Host views stand in for device ones: sm80_mma_supports only looks at shapes, dtypes,
    // strides and pointer alignment. Misalignment is simulated by bumping a stride.
    for (const std::string& name : misalign) {
      kda::TensorView* v = name == "q" ? &p.q : name == "h" ? &p.h : &p.A;
      v->strides[v->rank - 2] += 1;
    }
    EXPECT_EQ(kda::detail::sm80_mma_supports(p, d), expected) << what;
  };
  WyDqkgConfig base = small(DType::bf16, DType::f32, 64, 128, 128);
  base.T = 70;
  check(base, true, {}, "bf16, h f32, K = V = 128");
  WyDqkgConfig c = base;
  c.x_dtype = c.beta_dtype = DType::f32;
  check(c, true, {}, "float32 X (the 3xTF32 kernel)");
  c.state_v_first = true;
  c.BT = 16;
  check(c, true, {}, "float32 X, BT = 16, state_v_first");
  c = base;
  c.x_dtype = c.beta_dtype = DType::f32;
  c.K = 32;
  check(c, false, {}, "float32 X, K = 32");
  c = base;
  c.x_dtype = c.beta_dtype = DType::f32;
  check(c, false, {"A"}, "float32 X, A rows 4 bytes off");
  c = base;
  c.K = 100;
  check(c, false, {}, "K = 100");
  c = base;
  c.V = 32;
  check(c, false, {}, "V = 32");
  c = base;
  c.h_dtype = DType::bf16;
  c.state_v_first = true;
  check(c, true, {}, "h bf16, state_v_first");
  check(base, false, {"q"}, "q rows 2 bytes off 16-byte alignment");
  check(base, false, {"h"}, "h rows 4 bytes off");
}

// The kernels' per-unit offsets are 32-bit: a token stride whose BT rows reach past 2^31 - 1
// elements is refused, with the tensor named; one that just fits is taken.
TEST(CudaFastPathSupports, RefusesOffsetsPast32Bits) {
  WyDqkgConfig c = small(DType::bf16, DType::f32, 64, 128, 128);
  HostProblem hp = kda::io::make_random_problem(c);
  kda::ChunkBwdWyDqkgProblem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
  kda::ChunkBwdWyDqkgDims d;
  ASSERT_TRUE(p.validate(&d).ok());
  // Host views stand in for device ones (only strides are looked at); multiples of 8 elements
  // keep g's rows 16-byte aligned.
  const int64_t fits = (int64_t{INT32_MAX} - d.K) / (d.BT - 1) / 8 * 8;
  p.g.strides[1] = fits;
  std::string why;
  EXPECT_TRUE(kda::detail::sm80_mma_supports(p, d, &why)) << why;
  p.g.strides[1] = fits + 8;
  EXPECT_FALSE(kda::detail::sm80_mma_supports(p, d, &why));
  EXPECT_NE(why.find("g reaches past 2^31 - 1"), std::string::npos) << why;
}

}  // namespace
