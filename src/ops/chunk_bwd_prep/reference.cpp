// cpu-ref of chunk_bwd_prep: the backward's first pass in float64 with plain loops. For each
// chunk (tokens t0 .. t0+L-1 of one sequence, rows i, j = 0 .. L-1) and value head hv, key head
// h = hv / (HV / H):
//   gate[i, c] = g[i, c]                                   (no gate in the kernel)
//              = L_b sigmoid(s x)  or  −s softplus(x)      (gate in the kernel: x = g + dt_bias,
//                                                          s = exp(A_log), L_b the lower bound)
//   gk[i]      = Σ_{j <= i} gate[j] / ln 2                 (chunk-local cumsum, log2)
//   beta_i     = beta, or sigmoid(beta) (times 2 with allow_neg_eigval)
//   q̂, k̂      = q, k, or x / sqrt(Σ x² + 1e-6) per row with l2norm
//   w[i]       = Σ_{j <= i} A[i, j] beta_j k̂_j ⊙ 2^gk_j
//   u[i]       = Σ_{j <= i} A[i, j] beta_j v_j
//   qg[i]      = q̂_i ⊙ 2^gk_i
//   kg[i]      = k̂_i ⊙ 2^(gk_last − gk_i)                 (last = L − 1)
//   dv[j]      = Σ_{i >= j} Aqk[i, j] do_i                 (Aqkᵀ do; the scale is in Aqk)
// A and Aqk are read only on and below the diagonal, inside the chunk (column j is the token's
// position in its chunk). Nothing is rounded on the way; every output is stored once.

#include <cmath>
#include <cstdint>
#include <exception>
#include <numbers>
#include <string>
#include <vector>

#include "core/chunk_plan.hpp"
#include "core/element.hpp"
#include "core/parallel_for.hpp"
#include "ops/chunk_bwd_epilogue/activations.hpp"
#include "ops/chunk_bwd_prep/backends.hpp"

namespace kda::detail {

namespace {

using P = ChunkBwdPrepProblem;
using D = ChunkBwdPrepDims;

// One (chunk, value head): its rows of every output.
void prep_unit(const P& p, const D& d, const ChunkTask& ch, int64_t hv) {
  const int64_t L = ch.len, K = d.K, V = d.V, h = hv / (d.HV / d.H);
  const int64_t b = ch.b, t0 = ch.t0;
  auto at = [](std::vector<double>& x, int64_t i, int64_t cols, int64_t col) -> double& {
    return x[static_cast<size_t>(i * cols + col)];
  };

  // gk: the chunk-local cumsum of the gate, in log2.
  const bool has_A_log = !p.A_log.empty_arg(), has_dt_bias = !p.dt_bias.empty_arg();
  const double A_log = has_A_log ? load_double(p.A_log, hv * p.A_log.strides[0]) : 0.0;
  std::vector<double> gk(static_cast<size_t>(L * K));
  for (int64_t c = 0; c < K; ++c) {
    double sum = 0.0;
    for (int64_t i = 0; i < L; ++i) {
      double gate = load_double(p.g, offset_of(p.g, b, t0 + i, hv, c));
      if (p.use_gate_in_kernel) {
        const double bias =
            has_dt_bias ? load_double(p.dt_bias, (hv * K + c) * p.dt_bias.strides[0]) : 0.0;
        gate = activations::gate_of(gate + bias, p.lower_bound, has_A_log, A_log).value;
      }
      sum += gate;
      at(gk, i, K, c) = sum / std::numbers::ln2;
    }
  }

  // beta, q̂, k̂.
  std::vector<double> beta(static_cast<size_t>(L));
  std::vector<double> q(static_cast<size_t>(L * K)), k(static_cast<size_t>(L * K));
  for (int64_t i = 0; i < L; ++i) {
    const double raw = load_double(p.beta, offset_of(p.beta, b, t0 + i, hv));
    beta[static_cast<size_t>(i)] =
        activations::beta_of(raw, p.use_beta_sigmoid_in_kernel, p.allow_neg_eigval).value;
    for (int64_t c = 0; c < K; ++c) {
      at(q, i, K, c) = load_double(p.q, offset_of(p.q, b, t0 + i, h, c));
      at(k, i, K, c) = load_double(p.k, offset_of(p.k, b, t0 + i, h, c));
    }
    if (p.use_qk_l2norm_in_kernel) {
      const double q_inv = activations::inverse_norm(&at(q, i, K, 0), K);
      const double k_inv = activations::inverse_norm(&at(k, i, K, 0), K);
      for (int64_t c = 0; c < K; ++c) {
        at(q, i, K, c) *= q_inv;
        at(k, i, K, c) *= k_inv;
      }
    }
  }

  // A[i, j] and Aqk[i, j] for j <= i < L; 0 elsewhere (never read).
  auto lower = [&](const TensorView& t, int64_t i, int64_t j) {
    return j <= i ? load_double(t, offset_of(t, b, t0 + i, hv, j)) : 0.0;
  };

  for (int64_t i = 0; i < L; ++i) {
    const int64_t t = t0 + i;
    for (int64_t c = 0; c < K; ++c) {
      store_float(p.gk, offset_of(p.gk, b, t, hv, c), static_cast<float>(at(gk, i, K, c)));
      double w = 0.0;
      for (int64_t j = 0; j <= i; ++j) {
        w += lower(p.A, i, j) * beta[static_cast<size_t>(j)] * at(k, j, K, c) *
             std::exp2(at(gk, j, K, c));
      }
      store_float(p.w, offset_of(p.w, b, t, hv, c), static_cast<float>(w));
      const double qg = at(q, i, K, c) * std::exp2(at(gk, i, K, c));
      store_float(p.qg, offset_of(p.qg, b, t, hv, c), static_cast<float>(qg));
      const double kg = at(k, i, K, c) * std::exp2(at(gk, L - 1, K, c) - at(gk, i, K, c));
      store_float(p.kg, offset_of(p.kg, b, t, hv, c), static_cast<float>(kg));
    }
    for (int64_t e = 0; e < V; ++e) {
      double u = 0.0;
      for (int64_t j = 0; j <= i; ++j) {
        u += lower(p.A, i, j) * beta[static_cast<size_t>(j)] *
             load_double(p.v, offset_of(p.v, b, t0 + j, hv, e));
      }
      store_float(p.u, offset_of(p.u, b, t, hv, e), static_cast<float>(u));
      // dv of row i (as column j of Aqk): the rows at and after it.
      double dv = 0.0;
      for (int64_t r = i; r < L; ++r) {
        dv += lower(p.Aqk, r, i) * load_double(p.do_, offset_of(p.do_, b, t0 + r, hv, e));
      }
      store_float(p.dv, offset_of(p.dv, b, t, hv, e), static_cast<float>(dv));
    }
  }
}

}  // namespace

Status run_chunk_bwd_prep_cpu_ref(const P& problem, const D& dims) {
  try {
    const std::vector<ChunkTask> chunks = plan_chunks(problem.cu_seqlens, dims);
    cpu::parallel_for_chunk_heads<cpu::NoScratch>(
        chunks, dims.HV,
        [&](const ChunkTask& c, int64_t hv, cpu::NoScratch&) { prep_unit(problem, dims, c, hv); });
  } catch (const std::exception& e) {  // std::bad_alloc: the library returns errors, never throws
    return {StatusCode::internal, std::string("cpu-ref: ") + e.what()};
  }
  return Status::Ok();
}

}  // namespace kda::detail
