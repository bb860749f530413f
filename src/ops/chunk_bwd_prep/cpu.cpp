// cpu backend of chunk_bwd_prep: the steps of cpu-ref (reference.cpp) in float32, std::threads
// over (chunk, value head) units. The gate's activation is evaluated in float64
// (activations::gate_of) and rounded to float32; everything else (the cumsum, the l2norm, the
// exp2 factors, the products with A and Aqk) is float32, and each output is rounded to its dtype
// once, when stored. A and Aqk are read row by row, on and below the diagonal only.
//
// Buffers per unit (L <= BT rows):  gk, E, Q, Kk, kb: L x K
//                                    vb, dO, dv: L x V    a: one row of A or Aqk (<= L)
//                                    beta: L    row: K or V    bias: K

#include <cmath>
#include <cstdint>
#include <exception>
#include <numbers>
#include <string>
#include <vector>

#include "core/chunk_plan.hpp"
#include "core/parallel_for.hpp"
#include "core/tile_io.hpp"
#include "ops/chunk_bwd_epilogue/activations.hpp"
#include "ops/chunk_bwd_prep/backends.hpp"

namespace kda::detail {

namespace {

using P = ChunkBwdPrepProblem;
using D = ChunkBwdPrepDims;

// One thread's buffers, reused across the units it takes.
struct Scratch {
  std::vector<float> gk, E, Q, Kk, kb;  // (L, K): gk; 2^gk; q̂; k̂; beta k̂ 2^gk
  std::vector<float> vb, dO, dv;        // (L, V): beta v; do; Aqkᵀ do
  std::vector<float> a;                 // one row of A or Aqk, its first i + 1 columns
  std::vector<float> beta;              // (L)
  std::vector<float> row;               // one output row (K or V)
  std::vector<float> bias;              // (K): dt_bias of the head
};

using cpu::gather;
using cpu::head_rows;

// Rows normalised in place when `on` (x / sqrt(Σ x² + 1e-6), fla's l2norm).
void normalise_rows(std::vector<float>& x, int64_t rows, int64_t cols, bool on) {
  if (!on) return;
  for (int64_t i = 0; i < rows; ++i) {
    float* r = &x[static_cast<size_t>(i * cols)];
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c) sum += r[c] * r[c];
    const float inv = 1.0f / std::sqrt(sum + 1e-6f);
    for (int64_t c = 0; c < cols; ++c) r[c] *= inv;
  }
}

// Row i of A (or Aqk) of the chunk, columns 0 .. i, into s.a.
void gather_lower_row(const TensorView& t, const ChunkTask& ch, int64_t hv, int64_t i, Scratch& s) {
  gather(t, {offset_of(t, ch.b, ch.t0 + i, hv, 0), 1, 0, i + 1, t.strides[3]}, s.a);
}

void prep_unit(const P& p, const D& d, const ChunkTask& ch, int64_t hv, Scratch& s) {
  const int64_t L = ch.len, K = d.K, V = d.V, h = hv / (d.HV / d.H);
  const auto LK = static_cast<size_t>(L * K);

  // gk = the chunk-local cumsum of the gate / ln 2; E = 2^gk.
  gather(p.g, head_rows(p.g, ch.b, ch.t0, L, hv, K), s.gk);
  if (p.use_gate_in_kernel) {
    const bool has_A_log = !p.A_log.empty_arg();
    float A_log = 0.0f;
    if (has_A_log) cpu::gather_tile(p.A_log, {hv * p.A_log.strides[0], 1, 0, 1, 1}, &A_log);
    s.bias.assign(static_cast<size_t>(K), 0.0f);
    if (!p.dt_bias.empty_arg()) {
      cpu::gather_tile(p.dt_bias, {hv * K * p.dt_bias.strides[0], 1, 0, K, p.dt_bias.strides[0]},
                       s.bias.data());
    }
    for (size_t e = 0; e < LK; ++e) {
      const double x = static_cast<double>(s.gk[e]) + s.bias[e % static_cast<size_t>(K)];
      s.gk[e] = static_cast<float>(activations::gate_of(x, p.lower_bound, has_A_log, A_log).value);
    }
  }
  const float rcp_ln2 = static_cast<float>(1.0 / std::numbers::ln2);
  for (int64_t c = 0; c < K; ++c) {
    float sum = 0.0f;
    for (int64_t i = 0; i < L; ++i) {
      float& x = s.gk[static_cast<size_t>(i * K + c)];
      sum += x;
      x = sum * rcp_ln2;
    }
  }
  s.E.resize(LK);
  for (size_t e = 0; e < LK; ++e) s.E[e] = std::exp2(s.gk[e]);
  cpu::scatter_tile(p.gk, head_rows(p.gk, ch.b, ch.t0, L, hv, K), s.gk.data());

  // beta, q̂, k̂.
  gather(p.beta, cpu::head_column(p.beta, ch.b, ch.t0, L, hv), s.beta);
  for (float& x : s.beta) {
    x = static_cast<float>(
        activations::beta_of(x, p.use_beta_sigmoid_in_kernel, p.allow_neg_eigval).value);
  }
  gather(p.q, head_rows(p.q, ch.b, ch.t0, L, h, K), s.Q);
  gather(p.k, head_rows(p.k, ch.b, ch.t0, L, h, K), s.Kk);
  normalise_rows(s.Q, L, K, p.use_qk_l2norm_in_kernel);
  normalise_rows(s.Kk, L, K, p.use_qk_l2norm_in_kernel);

  // kb = beta k̂ 2^gk, vb = beta v.
  s.kb.resize(LK);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t c = 0; c < K; ++c) {
      const auto e = static_cast<size_t>(i * K + c);
      s.kb[e] = s.beta[static_cast<size_t>(i)] * s.Kk[e] * s.E[e];
    }
  gather(p.v, head_rows(p.v, ch.b, ch.t0, L, hv, V), s.vb);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t e = 0; e < V; ++e) s.vb[static_cast<size_t>(i * V + e)] *= s.beta[i];

  // w = A kb, u = A vb (A lower-inclusive), row by row.
  for (int64_t i = 0; i < L; ++i) {
    gather_lower_row(p.A, ch, hv, i, s);
    s.row.assign(static_cast<size_t>(K), 0.0f);
    for (int64_t j = 0; j <= i; ++j) {
      const float a = s.a[static_cast<size_t>(j)];
      const float* kb = &s.kb[static_cast<size_t>(j * K)];
      for (int64_t c = 0; c < K; ++c) s.row[c] += a * kb[c];
    }
    cpu::scatter_tile(p.w, head_rows(p.w, ch.b, ch.t0 + i, 1, hv, K), s.row.data());
    s.row.assign(static_cast<size_t>(V), 0.0f);
    for (int64_t j = 0; j <= i; ++j) {
      const float a = s.a[static_cast<size_t>(j)];
      const float* vb = &s.vb[static_cast<size_t>(j * V)];
      for (int64_t e = 0; e < V; ++e) s.row[e] += a * vb[e];
    }
    cpu::scatter_tile(p.u, head_rows(p.u, ch.b, ch.t0 + i, 1, hv, V), s.row.data());
  }

  // qg = q̂ 2^gk, kg = k̂ 2^(gk_last − gk): in place over Q and Kk.
  const float* gk_last = &s.gk[static_cast<size_t>((L - 1) * K)];
  for (int64_t i = 0; i < L; ++i)
    for (int64_t c = 0; c < K; ++c) {
      const auto e = static_cast<size_t>(i * K + c);
      s.Q[e] *= s.E[e];
      s.Kk[e] *= std::exp2(gk_last[c] - s.gk[e]);
    }
  cpu::scatter_tile(p.qg, head_rows(p.qg, ch.b, ch.t0, L, hv, K), s.Q.data());
  cpu::scatter_tile(p.kg, head_rows(p.kg, ch.b, ch.t0, L, hv, K), s.Kk.data());

  // dv = Aqkᵀ do: row i of Aqk adds Aqk[i, j] do_i into dv_j for j <= i.
  gather(p.do_, head_rows(p.do_, ch.b, ch.t0, L, hv, V), s.dO);
  s.dv.assign(static_cast<size_t>(L * V), 0.0f);
  for (int64_t i = 0; i < L; ++i) {
    gather_lower_row(p.Aqk, ch, hv, i, s);
    const float* dO = &s.dO[static_cast<size_t>(i * V)];
    for (int64_t j = 0; j <= i; ++j) {
      const float a = s.a[static_cast<size_t>(j)];
      float* dv = &s.dv[static_cast<size_t>(j * V)];
      for (int64_t e = 0; e < V; ++e) dv[e] += a * dO[e];
    }
  }
  cpu::scatter_tile(p.dv, head_rows(p.dv, ch.b, ch.t0, L, hv, V), s.dv.data());
}

}  // namespace

Status run_chunk_bwd_prep_cpu(const P& problem, const D& dims) {
  try {
    const std::vector<ChunkTask> chunks = plan_chunks(problem.cu_seqlens, dims);
    cpu::parallel_for_chunk_heads<Scratch>(
        chunks, dims.HV,
        [&](const ChunkTask& ch, int64_t hv, Scratch& s) { prep_unit(problem, dims, ch, hv, s); });
  } catch (const std::exception& e) {
    return {StatusCode::internal, std::string("cpu: ") + e.what()};
  }
  return Status::Ok();
}

}  // namespace kda::detail
