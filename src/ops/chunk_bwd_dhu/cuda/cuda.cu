// chunk_bwd_dhu's CUDA backend: one CTA per (sequence, value head, slice of 32 value columns),
// on the tensors' device and the caller's stream. 16-bit X with chunks of 64, K <= 128 (a
// multiple of 8), V a multiple of 8 and rows copyable in 16-byte pieces run the tensor-core
// kernel (mma_kernel.cuh); every other problem, and Kernel::simt, the general kernel
// (simt_kernel.cuh).

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/devices.hpp"
#include "cuda/common/dispatch.hpp"
#include "cuda/common/dtype_tag.cuh"
#include "cuda/common/kernel_attributes.hpp"
#include "ops/chunk_bwd_dhu/backends.hpp"
#include "ops/chunk_bwd_dhu/cuda/mma_kernel.cuh"
#include "ops/chunk_bwd_dhu/cuda/simt_kernel.cuh"

namespace kda::cuda::dhu {

namespace {

// A per-sequence state [N, HV, K, V] (or [.., V, K]) as S[k][v].
SeqStateView seq_state_view(const TensorView& t, bool state_v_first) {
  if (t.empty_arg()) return {};
  const int64_t stride_k = state_v_first ? t.strides[3] : t.strides[2];
  const int64_t stride_v = state_v_first ? t.strides[2] : t.strides[3];
  return {t.data, t.strides[0], t.strides[1], stride_k, stride_v};
}

DhuParams make_params(const ChunkBwdDhuProblem& problem, const ChunkBwdDhuDims& dims) {
  const bool v_first = problem.state_v_first;
  DhuParams p;
  p.q = token_view(problem.q);
  p.k = token_view(problem.k);
  p.w = token_view(problem.w);
  p.do_ = token_view(problem.do_);
  p.dv = token_view(problem.dv);
  if (dims.use_g) p.g = column_view(problem.g);
  if (dims.use_gk) p.gk = token_view(problem.gk);
  p.dht = seq_state_view(problem.dht, v_first);
  p.dht_is_f32 = !problem.dht.empty_arg() && problem.dht.dtype == DType::f32;
  p.varlen = dims.varlen;
  if (dims.varlen) p.cu_seqlens = index_view(problem.cu_seqlens);
  p.dh = state_view(problem.dh, v_first);
  p.dh0 = seq_state_view(problem.dh0, v_first);
  p.dv2 = problem.dv2.data;
  p.B = dims.B;
  p.T = dims.T;
  p.H = dims.H;
  p.HV = dims.HV;
  p.K = dims.K;
  p.V = dims.V;
  p.NT = dims.NT;
  p.num_seqs = dims.num_seqs;
  p.heads_per_group = dims.HV / dims.H;
  p.chunk_size = static_cast<int>(dims.BT);
  p.scale = static_cast<float>(dims.scale);
  return p;
}

// Whether the tensor-core kernel takes the problem: its shapes, and every tile it copies and
// every state it stores in whole 16-byte pieces.
bool mma_kernel_takes(const ChunkBwdDhuProblem& problem, const ChunkBwdDhuDims& dims) {
  if (dims.x_dtype == DType::f32 || dims.BT != mma16::kL || dims.K > mma16::kKPad ||
      dims.K % 8 != 0 || dims.V % 8 != 0) {
    return false;
  }
  for (const TensorView* t : {&problem.q, &problem.k, &problem.w, &problem.do_, &problem.dv}) {
    if (row_copy_bytes(*t) != 16) return false;
  }
  for (const TensorView* t : {&problem.dh, &problem.dv2}) {
    if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0) return false;
  }
  return true;
}

dim3 grid_of(const DhuParams& p, int slice) {
  return dim3(static_cast<unsigned>(p.num_seqs * p.HV),
              static_cast<unsigned>((p.V + slice - 1) / slice));
}

template <typename X>
Status launch_mma(const DhuParams& p, int device, cudaStream_t stream) {
  static const std::string name = std::string("chunk_bwd_dhu_mma_kernel<X=") + dtype_tag<X>() + ">";
  const void* kernel = reinterpret_cast<const void*>(&mma16::chunk_bwd_dhu_mma_kernel<X>);
  if (Status s = ensure_max_dynamic_smem(kernel, device, mma16::kSmemBytes, name.c_str()); !s.ok())
    return s;
  mma16::chunk_bwd_dhu_mma_kernel<X>
      <<<grid_of(p, mma16::kBV), mma16::kThreads, mma16::kSmemBytes, stream>>>(p);
  return launch_status(name);
}

template <typename X>
Status launch_simt(const DhuParams& p, int device, cudaStream_t stream) {
  static const std::string name =
      std::string("chunk_bwd_dhu_simt_kernel<X=") + dtype_tag<X>() + ">";
  const int bytes = simt_smem_bytes(p.K, p.chunk_size);
  const void* kernel = reinterpret_cast<const void*>(&chunk_bwd_dhu_simt_kernel<X>);
  if (Status s = ensure_max_dynamic_smem(kernel, device, bytes, name.c_str()); !s.ok()) return s;
  chunk_bwd_dhu_simt_kernel<X><<<grid_of(p, kSlice), kSimtThreads, bytes, stream>>>(p);
  return launch_status(name);
}

}  // namespace

}  // namespace kda::cuda::dhu

namespace kda::detail {

Status run_chunk_bwd_dhu_cuda(const ChunkBwdDhuProblem& problem, const ChunkBwdDhuDims& dims,
                              Kernel kernel, void* stream) {
  using namespace kda::cuda;
  const dhu::DhuParams params = dhu::make_params(problem, dims);
  if (params.num_seqs == 0 || params.HV == 0) return Status::Ok();
  const bool mma = kernel != Kernel::simt && dhu::mma_kernel_takes(problem, dims);
  if (kernel == Kernel::sm80_mma && !mma) {
    return {StatusCode::unsupported,
            "kernel: chunk_bwd_dhu's tensor-core kernel takes 16-bit X, chunk_size 64, K <= 128 "
            "and K, V multiples of 8 with rows in 16-byte pieces; use auto or simt"};
  }
  const int device = problem.q.device.index;
  return run_on_device(device, stream, [&] {
    const auto cuda_stream = static_cast<cudaStream_t>(stream);
    return dispatch_x_dtype(dims.x_dtype, [&](auto tag) -> Status {
      using X = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<X, float>) {
        if (mma) return dhu::launch_mma<X>(params, device, cuda_stream);
      }
      return dhu::launch_simt<X>(params, device, cuda_stream);
    });
  });
}

}  // namespace kda::detail
