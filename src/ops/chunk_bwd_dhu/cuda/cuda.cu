// chunk_bwd_dhu's CUDA backend: the reverse state scan on the shared scan kernels
// (cuda/scans/: the tensor-core kernel for 16-bit X with chunks of 64, K <= 128 and K, V
// multiples of 8 in 16-byte rows; the general kernel for everything else and Kernel::simt).

#include "cuda/scans/launch.cuh"
#include "ops/chunk_bwd_dhu/backends.hpp"

namespace kda::detail {

Status run_chunk_bwd_dhu_cuda(const ChunkBwdDhuProblem& problem, const ChunkBwdDhuDims& dims,
                              Kernel kernel, void* stream) {
  using namespace kda::cuda;
  const bool v_first = problem.state_v_first;
  scans::ScanParams p;
  p.q = token_view(problem.q);
  p.k = token_view(problem.k);
  p.w = token_view(problem.w);
  p.do_ = token_view(problem.do_);
  p.values = token_view(problem.dv);
  scans::fill_shape(dims, problem.g, problem.gk, problem.cu_seqlens, &p);
  p.state_in = scans::seq_state_view(problem.dht, v_first);
  p.state_in_is_f32 = !problem.dht.empty_arg() && problem.dht.dtype == DType::f32;
  p.states = state_view(problem.dh, v_first);
  p.state_out = scans::seq_state_view(problem.dh0, v_first);
  p.values_out = problem.dv2.data;
  p.scale = static_cast<float>(dims.scale);
  const bool mma_takes =
      scans::mma_kernel_takes(dims.x_dtype, dims.BT, dims.K, dims.V,
                              {&problem.q, &problem.k, &problem.w, &problem.do_, &problem.dv},
                              problem.dh) &&
      scans::encode_tile_maps(&p, problem.k, problem.w, &problem.q);
  return scans::run_scan<true>(p, dims.x_dtype, mma_takes, kernel, problem.q.device.index, stream);
}

}  // namespace kda::detail
