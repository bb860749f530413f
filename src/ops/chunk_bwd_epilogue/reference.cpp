// cpu-ref of chunk_bwd_epilogue: the epilogue in float64 with plain loops. Per chunk and query/key
// head h, for each of its value heads hv: the activations of the chunk's rows (l2norm, the gate
// and its chunk-local cumulative sum, beta), the per-chunk math (chunk_math.hpp: SPEC.md's and
// SPEC-chunk-bwd-intra.md's steps and the reverse cumsum), then back through the activations;
// dq and dk are summed over the value heads before l2norm's backward. dA_log and ddt_bias are
// summed per chunk, then over the chunks in order: the same bits on any number of threads.

#include <cmath>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "core/chunk_plan.hpp"
#include "core/element.hpp"
#include "core/parallel_for.hpp"
#include "ops/chunk_bwd_epilogue/activations.hpp"
#include "ops/chunk_bwd_epilogue/backends.hpp"
#include "ops/chunk_bwd_epilogue/chunk_math.hpp"
#include "ops/chunk_bwd_epilogue/units.hpp"

namespace kda::detail {

namespace {

using epilogue::ChunkGradients;
using epilogue::ChunkInputs;
using reference::load_rows;
using reference::Matrix;
using reference::store_rows;

using P = ChunkBwdEpilogueProblem;
using D = ChunkBwdEpilogueDims;

// x's rows normalised in place when `on`; the inverse norms (1 when off).
std::vector<double> normalise_rows(Matrix& x, bool on) {
  std::vector<double> inv(static_cast<size_t>(x.rows), 1.0);
  if (!on) return inv;
  for (int64_t i = 0; i < x.rows; ++i) {
    double* row = &x.values[static_cast<size_t>(i * x.cols)];
    inv[i] = activations::inverse_norm(row, x.cols);
    for (int64_t c = 0; c < x.cols; ++c) row[c] *= inv[i];
  }
  return inv;
}

// One unit's gate and beta: the activated values the math reads, and their derivatives.
struct Activated {
  Matrix G;                             // L x K cumulative natural-log gate
  std::vector<activations::Gate> gate;  // L x K per token
  Matrix beta;                          // L x 1
  std::vector<double> d_beta_raw;       // L
};

Activated activate(const P& p, const D& d, const ChunkTask& c, int64_t hv) {
  const int64_t L = c.len, K = d.K;
  Activated a;
  a.G = Matrix(L, K);
  a.gate.resize(static_cast<size_t>(L * K));
  const bool has_A_log = !p.A_log.empty_arg(), has_dt_bias = !p.dt_bias.empty_arg();
  const double A_log = has_A_log ? load_double(p.A_log, hv * p.A_log.strides[0]) : 0.0;
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t k = 0; k < K; ++k) {
      const double g = load_double(p.g, offset_of(p.g, c.b, c.t0 + i, hv, k));
      activations::Gate& gate = a.gate[static_cast<size_t>(i * K + k)];
      if (p.use_gate_in_kernel) {
        const double bias =
            has_dt_bias ? load_double(p.dt_bias, (hv * K + k) * p.dt_bias.strides[0]) : 0.0;
        gate = activations::gate_of(g + bias, p.lower_bound, has_A_log, A_log);
      } else {
        gate = {g, 1.0, 0.0};
      }
      a.G(i, k) = (i > 0 ? a.G(i - 1, k) : 0.0) + gate.value;
    }
  }
  a.beta = Matrix(L, 1);
  a.d_beta_raw.resize(static_cast<size_t>(L));
  for (int64_t i = 0; i < L; ++i) {
    const double raw = load_double(p.beta, offset_of(p.beta, c.b, c.t0 + i, hv));
    const activations::Beta beta =
        activations::beta_of(raw, p.use_beta_sigmoid_in_kernel, p.allow_neg_eigval);
    a.beta(i, 0) = beta.value;
    a.d_beta_raw[static_cast<size_t>(i)] = beta.d_raw;
  }
  return a;
}

// One unit (chunk, query/key head h): writes its rows of every per-token output and adds its
// gate parameters' gradients to dA_log [HV] and ddt_bias [HV, K] (this unit's partials).
void run_unit(const P& p, const D& d, const ChunkTask& c, int64_t h, std::vector<double>& dA_log,
              std::vector<double>& ddt_bias) {
  const int64_t L = c.len, K = d.K, V = d.V, G = d.HV / d.H;
  Matrix Q = load_rows(p.q, c.b, c.t0, L, h, K);
  Matrix Kk = load_rows(p.k, c.b, c.t0, L, h, K);
  const std::vector<double> q_inv = normalise_rows(Q, p.use_qk_l2norm_in_kernel);
  const std::vector<double> k_inv = normalise_rows(Kk, p.use_qk_l2norm_in_kernel);
  Matrix dq(L, K), dk(L, K);  // by the normalised q, k, summed over the value heads
  const bool has_dt_bias = p.use_gate_in_kernel && !p.dt_bias.empty_arg();
  for (int64_t hv = h * G; hv < (h + 1) * G; ++hv) {
    const Activated a = activate(p, d, c, hv);
    ChunkInputs in;
    in.Q = Q;
    in.Kk = Kk;
    in.Vv = load_rows(p.v, c.b, c.t0, L, hv, V);
    in.dO = load_rows(p.do_, c.b, c.t0, L, hv, V);
    in.beta = a.beta;
    in.G = a.G;
    in.Akk = load_rows(p.A, c.b, c.t0, L, hv, L);
    in.S = reference::load_state(p.h, c.h_batch, c.h_chunk, hv, K, V, p.state_v_first);
    in.dS = reference::load_state(p.dh, c.h_batch, c.h_chunk, hv, K, V, p.state_v_first);
    in.Vn = load_rows(p.v_new, c.b, c.t0, L, hv, V);
    in.dV = load_rows(p.dv, c.b, c.t0, L, hv, V);
    const ChunkGradients r = epilogue::epilogue_chunk(in, d.scale);
    for (size_t n = 0; n < dq.values.size(); ++n) {
      dq.values[n] += r.dq.values[n];
      dk.values[n] += r.dk.values[n];
    }
    store_rows(p.dv_out, c.b, c.t0, hv, r.dv);
    Matrix dg(L, K);
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t k = 0; k < K; ++k) {
        const activations::Gate& gate = a.gate[static_cast<size_t>(i * K + k)];
        dg(i, k) = r.dgate(i, k) * gate.d_x;
        if (has_dt_bias) ddt_bias[static_cast<size_t>(hv * K + k)] += dg(i, k);
        dA_log[static_cast<size_t>(hv)] += r.dgate(i, k) * gate.d_A_log;  // 0 without A_log
      }
      store_float(p.dbeta, offset_of(p.dbeta, c.b, c.t0 + i, hv),
                  static_cast<float>(r.dbeta(i, 0) * a.d_beta_raw[static_cast<size_t>(i)]));
    }
    store_rows(p.dg, c.b, c.t0, hv, dg);
  }
  if (p.use_qk_l2norm_in_kernel) {
    for (int64_t i = 0; i < L; ++i) {
      activations::l2norm_backward(&Q.values[static_cast<size_t>(i * K)], q_inv[i],
                                   &dq.values[static_cast<size_t>(i * K)], K);
      activations::l2norm_backward(&Kk.values[static_cast<size_t>(i * K)], k_inv[i],
                                   &dk.values[static_cast<size_t>(i * K)], K);
    }
  }
  store_rows(p.dq, c.b, c.t0, h, dq);
  store_rows(p.dk, c.b, c.t0, h, dk);
}

}  // namespace

Status run_chunk_bwd_epilogue_cpu_ref(const P& problem, const D& dims) {
  return epilogue::run_units(problem, dims, "cpu-ref", run_unit);
}

}  // namespace kda::detail
