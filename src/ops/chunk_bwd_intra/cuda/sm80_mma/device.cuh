#pragma once
// Device building blocks of the chunk_bwd_intra kernel: exp2, the TF32 tensor-core helpers (from
// cuda/common/tf32_mma.cuh), the asynchronous tile copies into shared memory, L2 prefetches, and
// the resolution of a work unit from device-resident index tensors (every index bounds-checked).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/chunk_units.cuh"
#include "cuda/common/device_access.cuh"
#include "cuda/common/fast_math.cuh"
#include "cuda/common/mma_fragments.cuh"
#include "cuda/common/tf32_mma.cuh"
#include "ops/chunk_bwd_intra/cuda/params.hpp"

namespace kda::cuda::intra {

// --- arithmetic ----------------------------------------------------------------------------------

// 2^x on the special-function unit (cuda/common/fast_math.cuh). Every argument the kernel forms
// is <= 0 for a valid gate, so it never overflows.
using kda::cuda::ex2;

// The TF32 and 3xTF32 tensor-core pieces (shared with chunk_bwd_wy_dqkg's float32 kernel).
using mma::mma_split;
using mma::mma_tf32;
using mma::tf32_rna;
using mma::Tf32Split;

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
__device__ __forceinline__ int64_t origin(const TokenCopyView& t, const IntraUnit& u, int64_t head,
                                          int64_t col) {
  return u.batch * t.stride_batch + u.t0 * t.stride_token + head * t.stride_head +
         col * t.stride_col;
}

__device__ __forceinline__ int64_t origin(const ColumnView& t, const IntraUnit& u) {
  return u.batch * t.stride_batch + u.t0 * t.stride_token + u.hv * t.stride_head;
}

}  // namespace kda::cuda::intra
