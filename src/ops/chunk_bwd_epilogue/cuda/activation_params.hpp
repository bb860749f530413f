#pragma once
// The fields of a kernel parameter block that the layer's activations read (g, beta, A_log,
// dt_bias and the switches), filled from an operator's problem: the epilogue's and the
// backward's first pass's blocks name them alike, and both problems carry the same rows.

#include "cuda/common/views.hpp"
#include "kda/tensor.hpp"

namespace kda::cuda {

template <typename Problem, typename Params>
void fill_activation_params(const Problem& problem, Params* p) {
  p->g = token_view(problem.g);
  p->g_is_f32 = problem.g.dtype == DType::f32;
  p->beta = beta_view(problem.beta);
  if (!problem.A_log.empty_arg()) {
    p->A_log = static_cast<const float*>(problem.A_log.data);
    p->A_log_stride = problem.A_log.strides[0];
  }
  if (!problem.dt_bias.empty_arg()) {
    p->dt_bias = static_cast<const float*>(problem.dt_bias.data);
    p->dt_bias_stride = problem.dt_bias.strides[0];
  }
  p->l2norm = problem.use_qk_l2norm_in_kernel;
  p->gate_in_kernel = problem.use_gate_in_kernel;
  p->beta_sigmoid = problem.use_beta_sigmoid_in_kernel;
  p->neg_eigval = problem.allow_neg_eigval;
  p->has_lower_bound = problem.lower_bound.has_value();
  p->lower_bound = p->has_lower_bound ? static_cast<float>(*problem.lower_bound) : 0.0f;
}

}  // namespace kda::cuda
