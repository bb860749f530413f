// chunk_bwd_prep's CUDA backend, on the tensors' device and the caller's stream. The model's shape
// (bf16, chunks of 64, K = V = 128, rows copyable in 16-byte pieces) runs the bf16 kernel
// (bf16_kernel.cuh: cp.async tiles, bf16 mma.sync with split operands); every other problem the
// general kernel (kernel.cuh: TF32 tensor-core products, 3xTF32 for float32 X, any K and V,
// chunk sizes 16, 32 and 64). Kernel::simt is refused (there is no simt kernel).

#include <cuda_runtime.h>

#include <cstdint>

#include <string>
#include <type_traits>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/devices.hpp"
#include "cuda/common/dispatch.hpp"
#include "cuda/common/dtype_tag.cuh"
#include "cuda/common/kernel_attributes.hpp"
#include "ops/chunk_bwd_epilogue/cuda/activation_params.hpp"
#include "ops/chunk_bwd_prep/backends.hpp"
#include "ops/chunk_bwd_prep/cuda/bf16_kernel.cuh"
#include "ops/chunk_bwd_prep/cuda/kernel.cuh"

namespace kda::cuda::prep {

namespace {

PrepParams make_params(const ChunkBwdPrepProblem& problem, const ChunkBwdPrepDims& dims) {
  PrepParams p;
  p.q = token_view(problem.q);
  p.k = token_view(problem.k);
  p.v = token_view(problem.v);
  p.do_ = token_view(problem.do_);
  p.A = token_view(problem.A);
  p.Aqk = token_view(problem.Aqk);
  p.chunks =
      chunk_layout(problem.cu_seqlens, problem.chunk_indices, dims.T, dims.NT, dims.num_seqs);
  fill_activation_params(problem, &p);
  p.gk = static_cast<float*>(problem.gk.data);
  p.w = problem.w.data;
  p.u = problem.u.data;
  p.qg = problem.qg.data;
  p.kg = problem.kg.data;
  p.dv = problem.dv.data;
  p.B = dims.B;
  p.T = dims.T;
  p.H = dims.H;
  p.HV = dims.HV;
  p.K = dims.K;
  p.V = dims.V;
  p.heads_per_group = dims.HV / dims.H;
  p.num_chunks = dims.varlen ? dims.NT : dims.B * dims.NT;
  p.chunk_size = static_cast<int>(dims.BT);
  return p;
}

template <typename X, int kL>
Status launch(const PrepParams& p, int device, cudaStream_t stream) {
  using Split = std::conditional_t<std::is_same_v<X, float>, mma::Tf32x3Split, mma::Tf32Split<1>>;
  static const std::string name =
      std::string("chunk_bwd_prep_kernel<X=") + dtype_tag<X>() + ", BT=" + std::to_string(kL) + ">";
  if (p.num_chunks == 0 || p.HV == 0) return Status::Ok();
  constexpr int bytes = Smem<kL>::bytes;
  const void* kernel = reinterpret_cast<const void*>(&chunk_bwd_prep_kernel<X, kL, Split>);
  if (Status s = ensure_max_dynamic_smem(kernel, device, bytes, name.c_str()); !s.ok()) return s;
  const auto grid = static_cast<unsigned>(p.num_chunks * p.HV);
  chunk_bwd_prep_kernel<X, kL, Split><<<grid, kThreads, bytes, stream>>>(p);
  return launch_status(name);
}

// Whether the bf16 kernel takes the problem: its shapes, every tile it copies in whole 16-byte
// pieces, and the outputs it stores so.
bool bf16_kernel_takes(const ChunkBwdPrepProblem& problem, const ChunkBwdPrepDims& dims) {
  if (dims.x_dtype != DType::bf16 || dims.BT != bf16::kL || dims.K != bf16::kD ||
      dims.V != bf16::kD) {
    return false;
  }
  for (const TensorView* t :
       {&problem.q, &problem.k, &problem.v, &problem.do_, &problem.A, &problem.Aqk}) {
    if (row_copy_bytes(*t) != 16) return false;
  }
  for (const TensorView* t : {&problem.w, &problem.u, &problem.dv}) {
    if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0) return false;
  }
  return true;
}

Status launch_bf16(const PrepParams& p, int device, cudaStream_t stream) {
  static const std::string name = "chunk_bwd_prep_bf16_kernel";
  if (p.num_chunks == 0 || p.HV == 0) return Status::Ok();
  const void* kernel = reinterpret_cast<const void*>(&bf16::chunk_bwd_prep_bf16_kernel);
  if (Status s = ensure_max_dynamic_smem(kernel, device, bf16::kSmemBytes, name.c_str()); !s.ok())
    return s;
  const auto grid = static_cast<unsigned>(p.num_chunks * p.HV);
  bf16::chunk_bwd_prep_bf16_kernel<<<grid, bf16::kThreads, bf16::kSmemBytes, stream>>>(p);
  return launch_status(name);
}

}  // namespace

}  // namespace kda::cuda::prep

namespace kda::detail {

Status run_chunk_bwd_prep_cuda(const ChunkBwdPrepProblem& problem, const ChunkBwdPrepDims& dims,
                               Kernel kernel, void* stream) {
  using namespace kda::cuda;
  if (kernel == Kernel::simt) {
    return {StatusCode::unsupported,
            "kernel: chunk_bwd_prep has one CUDA kernel, on the tensor cores (sm80_mma or auto); "
            "there is no simt kernel"};
  }
  const prep::PrepParams params = prep::make_params(problem, dims);
  const int device = problem.q.device.index;
  return run_on_device(device, stream, [&] {
    const auto cuda_stream = static_cast<cudaStream_t>(stream);
    if (prep::bf16_kernel_takes(problem, dims)) {
      return prep::launch_bf16(params, device, cuda_stream);
    }
    return dispatch_x_dtype(dims.x_dtype, [&](auto tag) {
      using X = typename decltype(tag)::type;
      return dispatch_int<16, 32, 64>("chunk_size", dims.BT, [&](auto bt) {
        return prep::launch<X, decltype(bt)::value>(params, device, cuda_stream);
      });
    });
  });
}

}  // namespace kda::detail
