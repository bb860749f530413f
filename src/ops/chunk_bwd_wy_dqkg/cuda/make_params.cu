// Fills WyDqkgParams: 64-bit element strides of every view, state tensors as S[k][v].

#include "ops/chunk_bwd_wy_dqkg/cuda/make_params.hpp"

namespace kda::cuda {

WyDqkgParams make_wy_dqkg_params(const ChunkBwdWyDqkgProblem& problem,
                                 const ChunkBwdWyDqkgDims& dims) {
  WyDqkgParams p;
  p.q = token_view(problem.q);
  p.k = token_view(problem.k);
  p.v = token_view(problem.v);
  p.v_new = token_view(problem.v_new);
  p.do_ = token_view(problem.do_);
  p.dv = token_view(problem.dv);
  p.g = token_view(problem.g);
  p.A = token_view(problem.A);
  p.beta = beta_view(problem.beta);
  p.h = state_view(problem.h, problem.state_v_first);
  p.dh = state_view(problem.dh, problem.state_v_first);
  p.chunks =
      chunk_layout(problem.cu_seqlens, problem.chunk_indices, dims.T, dims.NT, dims.num_seqs);

  p.dq = static_cast<float*>(problem.dq.data);
  p.dk = static_cast<float*>(problem.dk.data);
  p.dg = static_cast<float*>(problem.dg.data);
  p.dv_out = problem.dv_out.data;
  p.db = static_cast<float*>(problem.db.data);
  p.dA = static_cast<float*>(problem.dA.data);

  p.B = dims.B;
  p.T = dims.T;
  p.H = dims.H;
  p.HV = dims.HV;
  p.K = dims.K;
  p.V = dims.V;
  p.heads_per_group = dims.HV / dims.H;
  p.num_units = (dims.varlen ? dims.NT : dims.B * dims.NT) * dims.HV;
  p.scale = static_cast<float>(problem.effective_scale());
  return p;
}

}  // namespace kda::cuda
