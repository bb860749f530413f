// cpu: the practical CPU path. float32 accumulation, Eigen for the small matrix products, and
// std::threads over (chunk, value head) work units. Each unit gathers its tiles from the strided
// views into contiguous float32 buffers (converting f16/bf16), runs SPEC.md's steps 1..12 on
// them, and scatters the results. The numbers of the steps match SPEC.md and cpu-ref.
//
// Tile shapes per unit (L <= BT rows):  Q, Kk, G: L x K   Vv, Vn, dO, dV: L x V   Ā: L x L
//                                        β: L              S, dS: K x V

#include <Eigen/Dense>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "core/chunk_plan.hpp"
#include "core/parallel_for.hpp"
#include "core/tile_io.hpp"
#include "ops/chunk_bwd_wy_dqkg/backends.hpp"

namespace kda::detail {

namespace {

using MatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ColumnF = Eigen::VectorXf;  // one value per row of the chunk (β, db)
using RowF = Eigen::RowVectorXf;  // one value per key column (gn, dgk)
using ArrayD = Eigen::Array<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// One thread's buffers, reused across the units it takes (resizing to an unchanged size does not
// reallocate, so only tail chunks cost an allocation).
struct Scratch {
  // Gathered inputs, SPEC names.
  MatrixF Q, Kk, G;        // (L, K)
  MatrixF Vv, Vn, dO, dV;  // (L, V)
  MatrixF Abar;            // (L, L)
  MatrixF S, dS;           // (K, V)
  ColumnF beta;            // (L)
  // Intermediates and outputs.
  ArrayD exponent;           // (L, K)  G · ln 2, then (gn - G) · ln 2, exponentiated in place
  MatrixF E, decay;          // (L, K)  exp2(G), exp2(gn - G)
  MatrixF dQ, dK0, dW, KG;   // (L, K)
  MatrixF dkgb, dk, dg;      // (L, K)
  MatrixF dvb, dv_out;       // (L, V)
  MatrixF X, AtX, dA_chunk;  // (L, L)
  MatrixF dA_rows;           // (L, BT)  what is stored: zero where j >= i or j >= L
  ColumnF db;                // (L)
  RowF gn, dgk;              // (K)
};

void gather(const TensorView& t, const cpu::TileRef& tile, MatrixF& dst) {
  dst.resize(tile.rows, tile.cols);
  cpu::gather_tile(t, tile, dst.data());
}

void gather_inputs(const ChunkBwdWyDqkgProblem& p, const ChunkBwdWyDqkgDims& d,
                   const ChunkTask& task, int64_t hv, Scratch& s) {
  const int64_t hq = hv / (d.HV / d.H);  // GVA: value head hv reads query/key head hq
  const int64_t L = task.len;
  using cpu::head_rows;
  gather(p.q, head_rows(p.q, task.b, task.t0, L, hq, d.K), s.Q);
  gather(p.k, head_rows(p.k, task.b, task.t0, L, hq, d.K), s.Kk);
  gather(p.g, head_rows(p.g, task.b, task.t0, L, hv, d.K), s.G);
  gather(p.v, head_rows(p.v, task.b, task.t0, L, hv, d.V), s.Vv);
  gather(p.v_new, head_rows(p.v_new, task.b, task.t0, L, hv, d.V), s.Vn);
  gather(p.do_, head_rows(p.do_, task.b, task.t0, L, hv, d.V), s.dO);
  gather(p.dv, head_rows(p.dv, task.b, task.t0, L, hv, d.V), s.dV);
  gather(p.A, head_rows(p.A, task.b, task.t0, L, hv, L), s.Abar);  // no mask; columns >= L unread
  gather(p.h, cpu::state_tile(p.h, task.h_batch, task.h_chunk, hv, d.K, d.V, p.state_v_first), s.S);
  gather(p.dh, cpu::state_tile(p.dh, task.h_batch, task.h_chunk, hv, d.K, d.V, p.state_v_first),
         s.dS);
  s.beta.resize(L);
  cpu::gather_tile(p.beta, cpu::head_column(p.beta, task.b, task.t0, L, hv), s.beta.data());
}

// The gate factors: E = exp2(G), decay = exp2(gn - G), gn = G[L-1]. Eigen has no exp2, so
// exp2(x) = exp(x · ln 2) is taken in float64: in float32 the rounding of x · ln 2 (and of
// gn - G) would cost up to |x| · 6e-8 relative error, too much for large |G|. exp runs in place
// on the float64 buffer: Eigen vectorizes it there, but not inside a cast expression.
void gate_factors(Scratch& s) {
  constexpr double kLn2 = 0.6931471805599453;
  const int64_t L = s.G.rows();
  s.gn = s.G.row(L - 1);
  s.exponent = s.G.cast<double>().array() * kLn2;
  s.exponent = s.exponent.exp();
  s.E = s.exponent.cast<float>();
  s.exponent = s.G.cast<double>().array() * -kLn2;
  s.exponent.rowwise() += s.gn.cast<double>().array() * kLn2;
  s.exponent = s.exponent.exp();
  s.decay = s.exponent.cast<float>();
}

void compute_chunk(float scale, int64_t BT, Scratch& s) {
  const int64_t L = s.G.rows();
  gate_factors(s);
  const auto beta_rows = s.beta.array();  // scales row i by β[i] via .colwise()

  // Step 1: dQ = (dO · Sᵀ) ⊙ E · scale
  s.dQ.noalias() = s.dO * s.S.transpose();
  s.dQ.array() *= s.E.array() * scale;
  // Step 2: dK0 = (Vn · dSᵀ) ⊙ exp2(gn − G)
  s.dK0.noalias() = s.Vn * s.dS.transpose();
  s.dK0.array() *= s.decay.array();
  // Step 3: dW = −(dV · Sᵀ)
  s.dW.noalias() = -s.dV * s.S.transpose();
  // Step 4: dvb = Āᵀ · dV;  dv_out = β ⊙ dvb
  s.dvb.noalias() = s.Abar.transpose() * s.dV;
  s.dv_out = s.dvb.array().colwise() * beta_rows;
  // Step 5: KG = Kk ⊙ E;  dkgb = Āᵀ · dW
  s.KG = s.Kk.cwiseProduct(s.E);
  s.dkgb.noalias() = s.Abar.transpose() * s.dW;
  // Step 6: db = rowsum(dvb ⊙ Vv) + rowsum(dkgb ⊙ KG)
  s.db = s.dvb.cwiseProduct(s.Vv).rowwise().sum() + s.dkgb.cwiseProduct(s.KG).rowwise().sum();
  // Step 7: dk = dK0 + dkgb ⊙ E ⊙ β
  s.dk = s.dK0.array() + (s.dkgb.array() * s.E.array()).colwise() * beta_rows;
  // Step 8: dgk = exp2(gn) ⊙ Σ_v (S ⊙ dS)[:, v] + Σ_i (Kk ⊙ dK0)[i, :]
  //   (exp2(gn) is the last row of E)
  s.dgk = s.S.cwiseProduct(s.dS).rowwise().sum().transpose().cwiseProduct(s.E.row(L - 1)) +
          s.Kk.cwiseProduct(s.dK0).colwise().sum();
  // Step 9: dg = Q ⊙ dQ − Kk ⊙ dK0 + KG ⊙ dkgb ⊙ β, then dg[L−1] += dgk
  s.dg = s.Q.array() * s.dQ.array() - s.Kk.array() * s.dK0.array() +
         (s.KG.array() * s.dkgb.array()).colwise() * beta_rows;
  s.dg.row(L - 1) += s.dgk;
  // Step 10: dq = dQ (scattered from s.dQ).
  // Step 11: D = dV · Vvᵀ + dW · KGᵀ;  X[i][j] = D[i][j] · β[j] where i > j, else 0
  s.X.noalias() = s.dV * s.Vv.transpose();
  s.X.noalias() += s.dW * s.KG.transpose();
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j < L; ++j) s.X(i, j) = i > j ? s.X(i, j) * s.beta(j) : 0.0f;
  }
  // Step 12: dA[i][j] = −(Āᵀ · X · Āᵀ)[i][j] where i > j, else 0 (and 0 for columns j >= L)
  s.AtX.noalias() = s.Abar.transpose() * s.X;
  s.dA_chunk.noalias() = s.AtX * s.Abar.transpose();
  s.dA_rows.setZero(L, BT);
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j < i; ++j) s.dA_rows(i, j) = -s.dA_chunk(i, j);
  }
}

void scatter_outputs(const ChunkBwdWyDqkgProblem& p, const ChunkBwdWyDqkgDims& d,
                     const ChunkTask& task, int64_t hv, const Scratch& s) {
  const int64_t L = task.len;
  using cpu::head_rows;
  cpu::scatter_tile(p.dq, head_rows(p.dq, task.b, task.t0, L, hv, d.K), s.dQ.data());
  cpu::scatter_tile(p.dk, head_rows(p.dk, task.b, task.t0, L, hv, d.K), s.dk.data());
  cpu::scatter_tile(p.dg, head_rows(p.dg, task.b, task.t0, L, hv, d.K), s.dg.data());
  cpu::scatter_tile(p.dv_out, head_rows(p.dv_out, task.b, task.t0, L, hv, d.V), s.dv_out.data());
  cpu::scatter_tile(p.dA, head_rows(p.dA, task.b, task.t0, L, hv, d.BT), s.dA_rows.data());
  cpu::scatter_tile(p.db, cpu::head_column(p.db, task.b, task.t0, L, hv), s.db.data());
}

}  // namespace

Status run_chunk_bwd_wy_dqkg_cpu(const ChunkBwdWyDqkgProblem& problem,
                                 const ChunkBwdWyDqkgDims& dims) {
  try {
    const std::vector<ChunkTask> tasks = plan_chunks(problem.cu_seqlens, dims);
    const float scale = static_cast<float>(problem.effective_scale());
    cpu::parallel_for_chunk_heads<Scratch>(
        tasks, dims.HV, [&](const ChunkTask& task, int64_t hv, Scratch& scratch) {
          gather_inputs(problem, dims, task, hv, scratch);
          compute_chunk(scale, dims.BT, scratch);
          scatter_outputs(problem, dims, task, hv, scratch);
        });
  } catch (const std::exception& e) {
    return {StatusCode::internal, std::string("cpu: ") + e.what()};
  }
  return Status::Ok();
}

}  // namespace kda::detail
