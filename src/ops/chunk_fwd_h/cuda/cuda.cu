// chunk_fwd_h's CUDA backend: the forward state scan on the shared scan kernels (cuda/scans/:
// the tensor-core kernel for 16-bit X with chunks of 64, K <= 128 and K, V multiples of 8 in
// 16-byte rows; the general kernel for everything else and Kernel::simt).

#include "cuda/scans/launch.cuh"
#include "ops/chunk_fwd_h/backends.hpp"

namespace kda::detail {

Status run_chunk_fwd_h_cuda(const ChunkFwdHProblem& problem, const ChunkFwdHDims& dims,
                            Kernel kernel, void* stream) {
  using namespace kda::cuda;
  const bool v_first = problem.state_v_first;
  scans::ScanParams p;
  p.k = token_view(problem.k);
  p.w = token_view(problem.w);
  p.values = token_view(problem.u);
  scans::fill_shape(dims, problem.g, problem.gk, problem.cu_seqlens, &p);
  p.state_in = scans::seq_state_view(problem.initial_state, v_first);
  p.state_in_is_f32 =
      !problem.initial_state.empty_arg() && problem.initial_state.dtype == DType::f32;
  p.states = state_view(problem.h, v_first);
  p.state_out = scans::seq_state_view(problem.final_state, v_first);
  p.values_out = problem.v_new.data;
  const bool mma_takes = scans::mma_kernel_takes(dims.x_dtype, dims.BT, dims.K, dims.V,
                                                 {&problem.k, &problem.w, &problem.u}, problem.h) &&
                         scans::encode_tile_maps(&p, problem.w, problem.k, nullptr);
  return scans::run_scan<false>(p, dims.x_dtype, mma_takes, kernel, problem.k.device.index, stream);
}

}  // namespace kda::detail
