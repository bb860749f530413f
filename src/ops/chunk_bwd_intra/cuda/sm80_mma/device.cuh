#pragma once
// Device building blocks of the chunk_bwd_intra kernel: exp2 and TF32 tensor-core helpers, the
// asynchronous tile copies into shared memory, L2 prefetches, and the resolution of a work unit
// from device-resident index tensors (every index bounds-checked).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/chunk_units.cuh"
#include "cuda/common/device_access.cuh"
#include "cuda/common/mma_fragments.cuh"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/params.hpp"

namespace kda::cuda::intra {

// --- arithmetic ----------------------------------------------------------------------------------

// 2^x on the special-function unit (relative error about 2^-22; 0 for x below -126, no NaN for
// finite x). Every argument the kernel forms is <= 0 for a valid gate, so it never overflows.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// x rounded to TF32 (10 mantissa bits), to nearest with ties away from zero.
__device__ __forceinline__ uint32_t tf32_rna(float x) {
  uint32_t y;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(y) : "f"(x));
  return y;
}

// d += A · B for one m16n8k8 tile with TF32 inputs and float32 accumulation. Fragments (PTX ISA,
// "Matrix Fragments for mma.m16n8k8", .tf32), g = lane / 4, q = lane % 4:
//   A 16 x 8: a[0] = (g, q), a[1] = (g + 8, q), a[2] = (g, q + 4), a[3] = (g + 8, q + 4)
//   B  8 x 8: b0 = (q, g), b1 = (q + 4, g)
//   C 16 x 8: d[0] = (g, 2q), d[1] = (g, 2q + 1), d[2] = (g + 8, 2q), d[3] = (g + 8, 2q + 1)
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// An mma operand split for kSplit products: kSplit == 1 is plain TF32 (x rounded once);
// kSplit == 3 is "3xTF32", x = hi + lo with both parts TF32, and a product a·b taken as
// a_lo·b_hi + a_hi·b_lo + a_hi·b_hi (float32-level accuracy: the dropped a_lo·b_lo is 2^-22
// relative).
template <int kSplit>
struct Tf32Split {
  uint32_t hi;
  uint32_t lo;
  __device__ __forceinline__ explicit Tf32Split(float x) {
    if constexpr (kSplit == 1) {
      // Round half away from zero in one integer add: the tensor cores read a TF32 operand's
      // top 19 bits and ignore the 13 below, so adding half of the dropped range and letting
      // them truncate rounds as cvt.rna does for every finite x (cvt.rna costs a compare and a
      // predicated add; an infinite or NaN x, which no read input holds, may come out NaN).
      hi = __float_as_uint(x) + 0x1000u;
      lo = 0u;
    } else {
      hi = tf32_rna(x);
      lo = tf32_rna(x - __uint_as_float(hi));
    }
  }
};

template <int kSplit>
__device__ __forceinline__ void mma_split(float (&d)[4], const Tf32Split<kSplit> (&a)[4],
                                          const Tf32Split<kSplit>& b0,
                                          const Tf32Split<kSplit>& b1) {
  const uint32_t a_hi[4] = {a[0].hi, a[1].hi, a[2].hi, a[3].hi};
  if constexpr (kSplit == 3) {
    const uint32_t a_lo[4] = {a[0].lo, a[1].lo, a[2].lo, a[3].lo};
    mma_tf32(d, a_lo, b0.hi, b1.hi);
    mma_tf32(d, a_hi, b0.lo, b1.lo);
  } else {
    static_assert(kSplit == 1, "kSplit is 1 (TF32) or 3 (3xTF32)");
  }
  mma_tf32(d, a_hi, b0.hi, b1.hi);
}

// --- copies into shared memory ----------------------------------------------------------------

// Copies `bytes` (a multiple of 4: 4, 8 or 16) from global to shared memory asynchronously; only
// the first `src_bytes` (0..bytes) are read, the rest zero-filled. src must be a valid pointer
// even when src_bytes == 0 (nothing is read then). Both addresses aligned to `bytes`.
__device__ __forceinline__ void cp_async(void* dst, const void* src, int bytes, int src_bytes) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  if (bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(src_bytes)
                 : "memory");
  } else if (bytes == 8) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes)
                 : "memory");
  }
}

using mma::cp_async_commit;

__device__ __forceinline__ void cp_async_wait_all() {
  mma::cp_async_wait<0>();
}

// Asks L2 to fetch the 128-byte line holding `p` (nothing reaches the SM, nothing waits).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// Line m of a row of `row_bytes` bytes at `start`: the row's first byte for m = 0, else the m-th
// 128-byte line after the one holding it; prefetched to L2 when it lies inside the row.
__device__ __forceinline__ void prefetch_row_line(uintptr_t start, int row_bytes, int m) {
  const uintptr_t at = m == 0 ? start : (start & ~uintptr_t{127}) + 128u * m;
  if (at < start + row_bytes) prefetch_l2(reinterpret_cast<const void*>(at));
}

// One tile of a stage: `rows` rows, row r of row_elems(r) elements of `elem_bytes` each (a
// multiple of copy_bytes / elem_bytes) at dst + dst_row_offset(r) bytes. Row r's first
// valid_elems(r) elements come from src_row(r) (a byte pointer to the row's first element, read
// with column stride `col_stride` elements); the rest of the row is zero-filled. copy_bytes > 0:
// asynchronous copies of that many bytes (contiguous columns, aligned rows); 0: element-by-element
// loads and stores. src_row(r) must be a valid pointer for every row, even one whose
// valid_elems(r) is 0 (nothing is read from it then). Warp w takes rows w, w + warps, ...; its
// lanes take the row's chunks.
template <typename RowElems, typename DstRowOffset, typename SrcRow, typename ValidElems>
__device__ __forceinline__ void copy_tile(unsigned char* dst, int rows, RowElems row_elems_of,
                                          int elem_bytes, int copy_bytes, int64_t col_stride,
                                          DstRowOffset dst_row_offset, SrcRow src_row,
                                          ValidElems valid_elems, int warp, int warps, int lane) {
  for (int r = warp; r < rows; r += warps) {
    const int row_elems = row_elems_of(r);
    unsigned char* d = dst + dst_row_offset(r);
    const unsigned char* src = src_row(r);
    const int valid = valid_elems(r);
    if (copy_bytes > 0) {
      const int chunk_elems = copy_bytes / elem_bytes;
      for (int col = lane * chunk_elems; col < row_elems; col += 32 * chunk_elems) {
        const int left = valid - col;
        const int src_bytes =
            left <= 0 ? 0 : (left >= chunk_elems ? copy_bytes : left * elem_bytes);
        cp_async(d + col * elem_bytes, src_bytes > 0 ? src + col * elem_bytes : src, copy_bytes,
                 src_bytes);
      }
    } else {
      for (int col = lane; col < row_elems; col += 32) {
        const bool inside = col < valid;
        if (elem_bytes == 4) {
          *reinterpret_cast<uint32_t*>(d + col * 4) =
              inside ? *reinterpret_cast<const uint32_t*>(src + col * col_stride * 4) : 0u;
        } else {
          *reinterpret_cast<uint16_t*>(d + col * 2) =
              inside ? *reinterpret_cast<const uint16_t*>(src + col * col_stride * 2) : 0u;
        }
      }
    }
  }
}

// L2 prefetches of `rows` rows of `row_bytes` contiguous bytes each (row r starting at
// src_row(r)): one prefetch per 128-byte line, each at an address inside the row. Warp w takes
// rows w, w + warps, ...
template <typename SrcRow>
__device__ __forceinline__ void prefetch_rows_l2(int rows, int row_bytes, SrcRow src_row, int warp,
                                                 int warps, int lane) {
  if (row_bytes <= 0) return;
  for (int r = warp; r < rows; r += warps) {
    const auto start = reinterpret_cast<uintptr_t>(src_row(r));
    for (int m = lane; m * 128 < row_bytes + 128; m += 32) {
      prefetch_row_line(start, row_bytes, m);
    }
  }
}

// --- work units ----------------------------------------------------------------------------------
// Unit u = chunk * HV + hv (chunks in cu_seqlens order). With device-resident index tensors each
// unit checks what it reads: sequence id in [0, N), 0 <= bos <= eos <= T, 0 <= chunk id <
// ceil((eos - bos) / BT). A unit that fails is skipped: it reads and writes nothing (its output
// rows keep what the caller's buffers held; inconsistent indices are a caller error, the guarantee
// is only that they never cause an out-of-bounds access). Without chunk_indices the units past
// the chunks cu_seqlens describes (NT is then an upper bound) are skipped the same way.

// Trivially constructible, for shared memory.
struct IntraUnit {
  int64_t batch;  // batch row (0 when varlen)
  int64_t t0;     // first token of the chunk within the batch row
  int64_t hv;     // value head
  int len;        // rows in the chunk, 1..BT
  int valid;
};
static_assert(sizeof(IntraUnit) == 32, "the shared-memory map keeps 128 bytes for 3 units");

// Called by one whole warp; every lane returns the same unit. The chunk walk (and its bounds
// checks of device-resident index tensors) is the shared one of cuda/common/chunk_units.cuh;
// kept out of line here to spare the kernel's registers.
inline __device__ __noinline__ IntraUnit resolve_unit(const IntraParams& p, int64_t unit,
                                                      int chunk_size, int lane) {
  IntraUnit w{};
  w.hv = unit % p.HV;
  const ChunkSpan c = resolve_chunk(p.chunks, unit / p.HV, chunk_size, lane);
  if (!c.valid) return w;
  w.batch = c.batch;
  w.t0 = c.t0;
  w.len = c.len;
  w.valid = 1;
  return w;
}

// Element offset of (batch, t0, head, col) in a [B, T, heads, cols] tensor.
__device__ __forceinline__ int64_t origin(const IntraRows& t, const IntraUnit& u, int64_t head,
                                          int64_t col) {
  return u.batch * t.stride_batch + u.t0 * t.stride_token + head * t.stride_head +
         col * t.stride_col;
}

__device__ __forceinline__ int64_t origin(const IntraColumn& t, const IntraUnit& u) {
  return u.batch * t.stride_batch + u.t0 * t.stride_token + u.hv * t.stride_head;
}

}  // namespace kda::cuda::intra
