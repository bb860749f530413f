#pragma once
// The state scans' launches, shared by chunk_bwd_dhu and chunk_fwd_h (their cuda.cu files fill
// ScanParams from their problems): the tensor-core kernel where it takes the problem
// (mma_kernel_takes), else the general kernel; Kernel::simt always the general one, Kernel::
// sm80_mma the tensor-core one or a refusal that says what it takes. One CTA per (sequence,
// value head, slice of 32 value columns), on the caller's stream.

#include <cuda_runtime.h>

#include <initializer_list>
#include <string>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/devices.hpp"
#include "cuda/common/dispatch.hpp"
#include "cuda/common/dtype_tag.cuh"
#include "cuda/common/kernel_attributes.hpp"
#include "cuda/common/token_tile_map.hpp"
#include "cuda/scans/mma_kernel.cuh"
#include "cuda/scans/simt_kernel.cuh"
#include "kda/backend.hpp"

namespace kda::cuda::scans {

// Whether the tensor-core kernel takes a problem: 16-bit X, chunks of 64, K <= 128 and K, V
// multiples of 8, every token tensor it copies in 16-byte row pieces, the states' output 16-byte
// aligned (the values' output is written in 4-byte pairs). Its K-wide tiles' maps must also encode
// (encode_tile_maps).
inline bool mma_kernel_takes(DType x, int64_t BT, int64_t K, int64_t V,
                             std::initializer_list<const TensorView*> tiles,
                             const TensorView& states) {
  if (x == DType::f32 || BT != mma16::kL || K > mma16::kKPad || K % 8 != 0 || V % 8 != 0) {
    return false;
  }
  for (const TensorView* t : tiles) {
    if (row_copy_bytes(*t) != 16) return false;
  }
  return reinterpret_cast<uintptr_t>(states.data) % 16 == 0;
}

// The tensor-core kernel's tile maps (reverse: k, w, q; forward: w, k, no q): false when one
// cannot be encoded, and the general kernel then takes the problem.
inline bool encode_tile_maps(ScanParams* p, const TensorView& first, const TensorView& second,
                             const TensorView* q) {
  // Boxes of 64 columns x 64 tokens of one head, with the 128-byte swizzle.
  const auto encode = [](TensorMapBytes* map, const TensorView& t) {
    return encode_token_rows_map(map, t, mma16::kL, mma16::kHalfCols, TileSwizzle::bytes128);
  };
  return encode(&p->first_map, first) && encode(&p->second_map, second) &&
         (q == nullptr || encode(&p->q_map, *q));
}

// Both kernels take value slices of the same width, so that one grid bound serves both.
static_assert(mma16::kBV == kSlice);

// One CTA per (sequence, value head, slice of `slice` value columns): scan_unit's order.
inline dim3 grid_of(const ScanParams& p, int slice) {
  return dim3(static_cast<unsigned>(p.num_seqs * p.HV * scan_slices(p, slice)));
}

// The kernels of one direction, named after its operator.
template <typename X, bool kReverse>
constexpr auto mma_kernel() {
  if constexpr (kReverse) {
    return &mma16::chunk_bwd_dhu_mma_kernel<X>;
  } else {
    return &mma16::chunk_fwd_h_mma_kernel<X>;
  }
}
template <typename X, bool kReverse>
constexpr auto simt_kernel() {
  if constexpr (kReverse) {
    return &chunk_bwd_dhu_simt_kernel<X>;
  } else {
    return &chunk_fwd_h_simt_kernel<X>;
  }
}

inline constexpr const char* op_of(bool reverse) {
  return reverse ? "chunk_bwd_dhu" : "chunk_fwd_h";
}

// The tensor-core or the general kernel of one direction.
template <typename X, bool kReverse>
Status launch_scan(const ScanParams& p, bool mma, int device, cudaStream_t stream) {
  if constexpr (!std::is_same_v<X, float>) {
    if (mma) {
      static const std::string name =
          std::string(op_of(kReverse)) + "_mma_kernel<X=" + dtype_tag<X>() + ">";
      constexpr auto kernel = mma_kernel<X, kReverse>();
      if (Status s = ensure_max_dynamic_smem(reinterpret_cast<const void*>(kernel), device,
                                             mma16::kSmemBytes, name.c_str());
          !s.ok()) {
        return s;
      }
      kernel<<<grid_of(p, mma16::kBV), mma16::kThreads, mma16::kSmemBytes, stream>>>(p);
      return launch_status(name);
    }
  }
  static const std::string name =
      std::string(op_of(kReverse)) + "_simt_kernel<X=" + dtype_tag<X>() + ">";
  const int bytes = simt_smem_bytes(p.K, p.chunk_size);
  constexpr auto kernel = simt_kernel<X, kReverse>();
  if (Status s = ensure_max_dynamic_smem(reinterpret_cast<const void*>(kernel), device, bytes,
                                         name.c_str());
      !s.ok()) {
    return s;
  }
  kernel<<<grid_of(p, kSlice), kSimtThreads, bytes, stream>>>(p);
  return launch_status(name);
}

// A scan of direction kReverse: the kernel choice, then the launch on `device` and `stream`.
template <bool kReverse>
Status run_scan(const ScanParams& p, DType x, bool mma_takes, Kernel kernel, int device,
                void* stream) {
  if (p.num_seqs == 0 || p.HV == 0) return Status::Ok();
  if (const int64_t ctas = p.num_seqs * p.HV * scan_slices(p, mma16::kBV);
      ctas > int64_t{0x7fffffff}) {
    return {StatusCode::unsupported,
            std::string(op_of(kReverse)) + ": sequences x value heads x value slices of 32 = " +
                std::to_string(ctas) + " CTAs, more than one grid holds (2^31 - 1)"};
  }
  const bool mma = kernel != Kernel::simt && mma_takes;
  if (kernel == Kernel::sm80_mma && !mma) {
    return {StatusCode::unsupported,
            std::string("kernel: ") + op_of(kReverse) +
                "'s tensor-core kernel takes 16-bit X, chunk_size 64, K <= 128 and K, V "
                "multiples of 8 with rows in 16-byte pieces; use auto or simt"};
  }
  return run_on_device(device, stream, [&] {
    const auto cuda_stream = static_cast<cudaStream_t>(stream);
    return dispatch_x_dtype(x, [&](auto tag) -> Status {
      using X = typename decltype(tag)::type;
      return launch_scan<X, kReverse>(p, mma, device, cuda_stream);
    });
  });
}

// The sizes and the chunk walk of a validated problem (either scan's dims), and its gates.
template <typename Dims>
void fill_shape(const Dims& dims, const TensorView& g, const TensorView& gk,
                const TensorView& cu_seqlens, ScanParams* p) {
  if (dims.use_g) p->g = column_view(g);
  if (dims.use_gk) p->gk = token_view(gk);
  p->varlen = dims.varlen;
  if (dims.varlen) p->cu_seqlens = index_view(cu_seqlens);
  p->B = dims.B;
  p->T = dims.T;
  p->H = dims.H;
  p->HV = dims.HV;
  p->K = dims.K;
  p->V = dims.V;
  p->NT = dims.NT;
  p->num_seqs = dims.num_seqs;
  p->heads_per_group = dims.HV / dims.H;
  p->chunk_size = static_cast<int>(dims.BT);
}

// A per-sequence state [N, HV, K, V] (or [.., V, K]) as S[k][v]; empty when absent.
inline SeqStateView seq_state_view(const TensorView& t, bool state_v_first) {
  if (t.empty_arg()) return {};
  const int64_t stride_k = state_v_first ? t.strides[3] : t.strides[2];
  const int64_t stride_v = state_v_first ? t.strides[2] : t.strides[3];
  return {t.data, t.strides[0], t.strides[1], stride_k, stride_v};
}

}  // namespace kda::cuda::scans
