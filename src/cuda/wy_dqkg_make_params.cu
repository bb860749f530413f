// Fills WyDqkgParams: 64-bit element strides of every view, state tensors as S[k][v].

#include "cuda/wy_dqkg_make_params.hpp"

namespace kda::cuda {

namespace {

TokenView token_view(const TensorView& t) {
  return {t.data, t.strides[0], t.strides[1], t.strides[2], t.strides[3]};
}

// h/dh as S[k][v]: for state_v_first the stored order is [.., V, K], so the strides swap.
StateView state_view(const TensorView& t, bool state_v_first) {
  const int64_t stride_k = state_v_first ? t.strides[4] : t.strides[3];
  const int64_t stride_v = state_v_first ? t.strides[3] : t.strides[4];
  return {t.data, t.strides[0], t.strides[1], t.strides[2], stride_k, stride_v};
}

IndexView index_view(const TensorView& t) {
  if (t.empty_arg()) return {};
  return {t.data, t.strides[0], t.rank > 1 ? t.strides[1] : 0, t.dtype == DType::i64};
}

}  // namespace

WyDqkgParams make_wy_dqkg_params(const Problem& problem, const Dims& dims) {
  WyDqkgParams p;
  p.q = token_view(problem.q);
  p.k = token_view(problem.k);
  p.v = token_view(problem.v);
  p.v_new = token_view(problem.v_new);
  p.do_ = token_view(problem.do_);
  p.dv = token_view(problem.dv);
  p.g = token_view(problem.g);
  p.A = token_view(problem.A);
  p.beta = {problem.beta.data, problem.beta.strides[0], problem.beta.strides[1],
            problem.beta.strides[2], problem.beta.dtype == DType::f32};
  p.h = state_view(problem.h, problem.state_v_first);
  p.dh = state_view(problem.dh, problem.state_v_first);
  p.varlen = dims.varlen;
  p.has_chunk_indices = dims.varlen && !problem.chunk_indices.empty_arg();
  p.cu_seqlens = index_view(problem.cu_seqlens);
  p.chunk_indices = index_view(problem.chunk_indices);

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
  p.NT = dims.NT;
  p.num_seqs = dims.num_seqs;
  p.heads_per_group = dims.HV / dims.H;
  p.num_units = (dims.varlen ? dims.NT : dims.B * dims.NT) * dims.HV;
  p.scale = static_cast<float>(problem.effective_scale());
  return p;
}

}  // namespace kda::cuda
