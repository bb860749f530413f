// chunk_bwd_epilogue's CUDA backend: a fused kernel for every (chunk, query/key head), then
// gate_params_kernel (reduce.cuh) for dA_log and ddt_bias, both on the tensors' device and the
// caller's stream. The model's shape (bf16, chunks of 64, K = V = 128, HV = H, h and dh in bf16,
// rows copyable in 16-byte pieces) runs the bf16 kernel (bf16/kernel.cuh: bf16 mma.sync, split
// operands where the kernel derives them); every other problem the general kernel (kernel.cuh:
// TF32 products, 3xTF32 for float32 X; K up to 128, any V, chunk sizes 16, 32 and 64). Both are
// tensor-core kernels, so Kernel::simt is refused.

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/devices.hpp"
#include "cuda/common/dispatch.hpp"
#include "cuda/common/dtype_tag.cuh"
#include "cuda/common/kernel_attributes.hpp"
#include "ops/chunk_bwd_epilogue/backends.hpp"
#include "ops/chunk_bwd_epilogue/cuda/activation_params.hpp"
#include "ops/chunk_bwd_epilogue/cuda/bf16/kernel.cuh"
#include "ops/chunk_bwd_epilogue/cuda/kernel.cuh"
#include "ops/chunk_bwd_epilogue/cuda/reduce.cuh"

namespace kda::cuda::epilogue {

namespace {

constexpr int64_t kMaxK = 32 * kMaxChannelBlocks;

EpilogueParams make_params(const ChunkBwdEpilogueProblem& problem,
                           const ChunkBwdEpilogueDims& dims) {
  EpilogueParams p;
  p.q = token_view(problem.q);
  p.k = token_view(problem.k);
  p.v = token_view(problem.v);
  p.do_ = token_view(problem.do_);
  p.v_new = token_view(problem.v_new);
  p.dv = token_view(problem.dv);
  p.A = token_view(problem.A);
  p.h = state_view(problem.h, problem.state_v_first);
  p.dh = state_view(problem.dh, problem.state_v_first);
  p.h_is_f32 = problem.h.dtype == DType::f32;
  p.chunks =
      chunk_layout(problem.cu_seqlens, problem.chunk_indices, dims.T, dims.NT, dims.num_seqs);
  fill_activation_params(problem, &p);
  p.dq = problem.dq.data;
  p.dk = problem.dk.data;
  p.dv_out = problem.dv_out.data;
  p.dg = static_cast<float*>(problem.dg.data);
  p.dbeta = static_cast<float*>(problem.dbeta.data);
  p.dA_log = static_cast<float*>(problem.dA_log.data);
  p.ddt_bias = static_cast<float*>(problem.ddt_bias.data);
  p.B = dims.B;
  p.T = dims.T;
  p.H = dims.H;
  p.HV = dims.HV;
  p.K = dims.K;
  p.V = dims.V;
  p.heads_per_group = dims.HV / dims.H;
  p.num_chunks = dims.varlen ? dims.NT : dims.B * dims.NT;
  p.chunk_size = static_cast<int>(dims.BT);
  p.scale = static_cast<float>(dims.scale);
  return p;
}

template <typename G, RatioForm kForm>
Status launch_gate_params_rows(const EpilogueParams& p, cudaStream_t stream) {
  static const std::string name = std::string("gate_params_rows_kernel<G=") + dtype_tag<G>() +
                                  ", Form=" + std::to_string(static_cast<int>(kForm)) + ">";
  gate_params_rows_kernel<G, kForm>
      <<<static_cast<unsigned>(p.HV * kReduceCluster), kReduceThreads, 0, stream>>>(p);
  return launch_status(name);
}

template <typename G>
Status launch_gate_params_rows(const EpilogueParams& p, cudaStream_t stream) {
  if (p.A_log == nullptr) return launch_gate_params_rows<G, RatioForm::kNone>(p, stream);
  return p.has_lower_bound ? launch_gate_params_rows<G, RatioForm::kLowerBound>(p, stream)
                           : launch_gate_params_rows<G, RatioForm::kSoftplus>(p, stream);
}

// dA_log and ddt_bias: by whole rows when the gate's parameters enter the layer and the layout
// allows (rows_kernel_takes), else by gate_params_kernel (which also writes the zeros).
template <typename X>
Status launch_gate_params(const EpilogueParams& p, cudaStream_t stream) {
  const bool sums = p.gate_in_kernel && (p.A_log != nullptr || p.dt_bias != nullptr);
  if (sums && rows_kernel_takes(p)) {
    return p.g_is_f32 ? launch_gate_params_rows<float>(p, stream)
                      : launch_gate_params_rows<X>(p, stream);
  }
  static const std::string name = std::string("gate_params_kernel<X=") + dtype_tag<X>() + ">";
  gate_params_kernel<X>
      <<<static_cast<unsigned>(p.HV * kReduceCluster), kReduceThreads, 0, stream>>>(p);
  return launch_status(name);
}

template <typename X, int kL>
Status launch(EpilogueParams p, int device, cudaStream_t stream) {
  using Split = std::conditional_t<std::is_same_v<X, float>, mma::Tf32x3Split, mma::Tf32Split<1>>;
  static const std::string name = std::string("chunk_bwd_epilogue_kernel<X=") + dtype_tag<X>() +
                                  ", BT=" + std::to_string(kL) + ">";
  if (p.num_chunks > 0 && p.H > 0) {
    DeviceFacts facts;
    if (Status s = device_facts(device, &facts); !s.ok()) return s;
    p.smem = make_smem_plan(kL, p.K);
    const int bytes = p.smem.total_bytes();
    if (bytes > facts.max_smem) {
      return {StatusCode::unsupported, name + ": needs " + std::to_string(bytes) +
                                           " bytes of shared memory, the device allows " +
                                           std::to_string(facts.max_smem)};
    }
    const void* kernel = reinterpret_cast<const void*>(&chunk_bwd_epilogue_kernel<X, kL, Split>);
    if (Status s = ensure_max_dynamic_smem(kernel, device, bytes, name.c_str()); !s.ok()) return s;
    const auto grid = static_cast<unsigned>(p.num_chunks * p.H);
    chunk_bwd_epilogue_kernel<X, kL, Split><<<grid, kThreads, bytes, stream>>>(p);
    if (Status s = launch_status(name); !s.ok()) return s;
  }
  return launch_gate_params<X>(p, stream);
}

// Whether the bf16 kernel takes the problem (bf16/plan.cuh): its shapes, and every tile it
// copies and every output it stores in whole 16-byte (or 8-byte) pieces.
bool bf16_kernel_takes(const ChunkBwdEpilogueProblem& problem, const ChunkBwdEpilogueDims& dims) {
  if (dims.x_dtype != DType::bf16 || dims.BT != bf16::kL || dims.K != bf16::kD ||
      dims.V != bf16::kD || dims.HV != dims.H || problem.h.dtype != DType::bf16 ||
      problem.dh.dtype != DType::bf16) {
    return false;
  }
  for (const TensorView* t : {&problem.q, &problem.k, &problem.v, &problem.do_, &problem.v_new,
                              &problem.dv, &problem.A, &problem.h, &problem.dh}) {
    if (row_copy_bytes(*t) != 16) return false;
  }
  for (const TensorView* t : {&problem.dq, &problem.dk, &problem.dv_out}) {
    if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0) return false;
  }
  return true;
}

template <bool kVFirst>
Status launch_bf16(const EpilogueParams& p, int device, cudaStream_t stream) {
  static const std::string name =
      std::string("chunk_bwd_epilogue_bf16_kernel<VFirst=") + (kVFirst ? "1" : "0") + ">";
  if (p.num_chunks > 0 && p.H > 0) {
    const void* kernel =
        reinterpret_cast<const void*>(&bf16::chunk_bwd_epilogue_bf16_kernel<kVFirst>);
    if (Status s = ensure_max_dynamic_smem(kernel, device, bf16::kSmemBytes, name.c_str()); !s.ok())
      return s;
    const auto grid = static_cast<unsigned>(p.num_chunks * p.H);
    bf16::chunk_bwd_epilogue_bf16_kernel<kVFirst>
        <<<grid, bf16::kThreads, bf16::kSmemBytes, stream>>>(p);
    if (Status s = launch_status(name); !s.ok()) return s;
  }
  return launch_gate_params<__nv_bfloat16>(p, stream);
}

}  // namespace

}  // namespace kda::cuda::epilogue

namespace kda::detail {

Status run_chunk_bwd_epilogue_cuda(const ChunkBwdEpilogueProblem& problem,
                                   const ChunkBwdEpilogueDims& dims, Kernel kernel, void* stream) {
  using namespace kda::cuda;
  if (kernel == Kernel::simt) {
    return {StatusCode::unsupported,
            "kernel: chunk_bwd_epilogue has one CUDA kernel, on the tensor cores (sm80_mma or "
            "auto); there is no simt kernel"};
  }
  if (dims.K > epilogue::kMaxK) {
    return {StatusCode::unsupported,
            "K = " + std::to_string(dims.K) + ": chunk_bwd_epilogue's CUDA kernel takes K up to " +
                std::to_string(epilogue::kMaxK) + "; cpu and cpu-ref take any K"};
  }
  const epilogue::EpilogueParams params = epilogue::make_params(problem, dims);
  return run_on_device(problem.q.device.index, stream, [&] {
    const auto cuda_stream = static_cast<cudaStream_t>(stream);
    if (epilogue::bf16_kernel_takes(problem, dims)) {
      const int device = problem.q.device.index;
      return problem.state_v_first ? epilogue::launch_bf16<true>(params, device, cuda_stream)
                                   : epilogue::launch_bf16<false>(params, device, cuda_stream);
    }
    return dispatch_x_dtype(dims.x_dtype, [&](auto tag) {
      using X = typename decltype(tag)::type;
      return dispatch_int<16, 32, 64>("chunk_size", dims.BT, [&](auto bt) {
        return epilogue::launch<X, decltype(bt)::value>(params, problem.q.device.index,
                                                        cuda_stream);
      });
    });
  });
}

}  // namespace kda::detail
