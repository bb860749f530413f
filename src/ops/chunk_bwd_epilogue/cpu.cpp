// cpu backend of chunk_bwd_epilogue: float32, std::threads over (chunk, query/key head) units,
// the per-chunk products on Eigen. The same steps as cpu-ref (reference.cpp, chunk_math.cpp), in
// the same order: the activations of the chunk's rows, the WY terms (SPEC.md's steps 1-12),
// dAqk, the intra-chunk terms (SPEC-chunk-bwd-intra.md's steps 1-8, every pair's decay taken
// exactly), the reverse cumsum and the activations' backward; dq, dk summed over the value
// heads before l2norm's backward; dA_log and ddt_bias per unit, then summed in unit order (the
// same bits on any number of threads).

#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "core/chunk_plan.hpp"
#include "core/parallel_for.hpp"
#include "core/tile_io.hpp"
#include "ops/chunk_bwd_epilogue/activations.hpp"
#include "ops/chunk_bwd_epilogue/backends.hpp"
#include "ops/chunk_bwd_epilogue/units.hpp"

namespace kda::detail {

namespace {

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Col = Eigen::VectorXf;
using P = ChunkBwdEpilogueProblem;
using D = ChunkBwdEpilogueDims;

Mat gather(const TensorView& t, const cpu::TileRef& tile) {
  Mat m(tile.rows, tile.cols);
  cpu::gather_tile(t, tile, m.data());
  return m;
}

void scatter(const TensorView& t, const cpu::TileRef& tile, const Mat& m) {
  cpu::scatter_tile(t, tile, m.data());
}

// Rows normalised in place when `on`; the inverse norms (1 when off).
Col normalise_rows(Mat& x, bool on) {
  Col inv = Col::Ones(x.rows());
  if (!on) return inv;
  for (int64_t i = 0; i < x.rows(); ++i) {
    inv(i) = 1.0f / std::sqrt(x.row(i).squaredNorm() + 1e-6f);
    x.row(i) *= inv(i);
  }
  return inv;
}

// One value head's activated gate and beta for the chunk's rows, with their derivatives.
struct Activated {
  Mat G, d_x, d_A_log;   // L x K: cumulative natural-log gate; d gate / d x, d gate / d A_log
  Col beta, d_beta_raw;  // L
};

Activated activate(const P& p, const D& d, const ChunkTask& c, int64_t hv) {
  const int64_t L = c.len, K = d.K;
  Activated a;
  const Mat g = gather(p.g, cpu::head_rows(p.g, c.b, c.t0, L, hv, K));
  a.G.resize(L, K);
  a.d_x.setOnes(L, K);
  a.d_A_log.setZero(L, K);
  const bool has_A_log = !p.A_log.empty_arg(), has_dt_bias = !p.dt_bias.empty_arg();
  float A_log = 0.0f;
  if (has_A_log) cpu::gather_tile(p.A_log, {hv * p.A_log.strides[0], 1, 0, 1, 1}, &A_log);
  Col bias = Col::Zero(K);
  if (p.use_gate_in_kernel && has_dt_bias) {
    cpu::gather_tile(p.dt_bias, {hv * K * p.dt_bias.strides[0], 1, 0, K, p.dt_bias.strides[0]},
                     bias.data());
  }
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t k = 0; k < K; ++k) {
      float value = g(i, k);
      if (p.use_gate_in_kernel) {
        const activations::Gate gate =
            activations::gate_of(g(i, k) + bias(k), p.lower_bound, has_A_log, A_log);
        value = static_cast<float>(gate.value);
        a.d_x(i, k) = static_cast<float>(gate.d_x);
        a.d_A_log(i, k) = static_cast<float>(gate.d_A_log);
      }
      a.G(i, k) = (i > 0 ? a.G(i - 1, k) : 0.0f) + value;
    }
  }
  const Mat raw = gather(p.beta, cpu::head_column(p.beta, c.b, c.t0, L, hv));
  a.beta.resize(L);
  a.d_beta_raw.resize(L);
  for (int64_t i = 0; i < L; ++i) {
    const activations::Beta beta =
        activations::beta_of(raw(i, 0), p.use_beta_sigmoid_in_kernel, p.allow_neg_eigval);
    a.beta(i) = static_cast<float>(beta.value);
    a.d_beta_raw(i) = static_cast<float>(beta.d_raw);
  }
  return a;
}

// The epilogue of one (chunk, value head), adding dq, dk into the unit's sums and storing the
// rest; the gate parameters' gradients go into the unit's partials.
void value_head(const P& p, const D& d, const ChunkTask& c, int64_t hv, const Mat& Q, const Mat& Kk,
                Mat& dq_sum, Mat& dk_sum, std::vector<double>& dA_log,
                std::vector<double>& ddt_bias) {
  const int64_t L = c.len, K = d.K, V = d.V;
  const float scale = static_cast<float>(d.scale);
  const Activated a = activate(p, d, c, hv);
  using cpu::head_rows;
  const Mat Vv = gather(p.v, head_rows(p.v, c.b, c.t0, L, hv, V));
  const Mat dO = gather(p.do_, head_rows(p.do_, c.b, c.t0, L, hv, V));
  const Mat Vn = gather(p.v_new, head_rows(p.v_new, c.b, c.t0, L, hv, V));
  const Mat dV = gather(p.dv, head_rows(p.dv, c.b, c.t0, L, hv, V));
  const Mat Akk = gather(p.A, head_rows(p.A, c.b, c.t0, L, hv, L));
  const Mat S = gather(p.h, cpu::state_tile(p.h, c.h_batch, c.h_chunk, hv, K, V, p.state_v_first));
  const Mat dS =
      gather(p.dh, cpu::state_tile(p.dh, c.h_batch, c.h_chunk, hv, K, V, p.state_v_first));

  const Mat E = a.G.array().exp().matrix();
  Mat to_end(L, K);  // exp(Gn − G)
  for (int64_t i = 0; i < L; ++i) to_end.row(i) = (a.G.row(L - 1) - a.G.row(i)).array().exp();
  // dAqk, lower-inclusive.
  Mat Pq = (scale * (dO * Vn.transpose())).triangularView<Eigen::Lower>();

  // SPEC.md steps 1-12.
  Mat dQ = scale * (dO * S.transpose()).cwiseProduct(E);       // 1
  const Mat dK0 = (Vn * dS.transpose()).cwiseProduct(to_end);  // 2
  const Mat dW = -(dV * S.transpose());                        // 3
  const Mat dvb = Akk.transpose() * dV;                        // 4
  const Mat dv_out = a.beta.asDiagonal() * dvb;
  const Mat KG = Kk.cwiseProduct(E);  // 5
  const Mat dkgb = Akk.transpose() * dW;
  Col db = dvb.cwiseProduct(Vv).rowwise().sum() + dkgb.cwiseProduct(KG).rowwise().sum();  // 6
  Mat dk = dK0 + a.beta.asDiagonal() * dkgb.cwiseProduct(E);                              // 7
  Mat dg =
      Q.cwiseProduct(dQ) - Kk.cwiseProduct(dK0) + a.beta.asDiagonal() * KG.cwiseProduct(dkgb);  // 9
  dg.row(L - 1) +=
      (a.G.row(L - 1).array().exp() * S.cwiseProduct(dS).rowwise().sum().transpose().array())
          .matrix() +
      Kk.cwiseProduct(dK0).colwise().sum();                  // 8
  const Mat Dm = dV * Vv.transpose() + dW * KG.transpose();  // 11
  Mat X = Mat::Zero(L, L);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < i; ++j) X(i, j) = Dm(i, j) * a.beta(j);
  const Mat Pk = (-(Akk.transpose() * X * Akk.transpose())).triangularView<Eigen::StrictlyLower>();

  // SPEC-chunk-bwd-intra.md steps 1-8, every pair's decay exactly.
  Mat dqa = Mat::Zero(L, K), r = Mat::Zero(L, K), dkc = Mat::Zero(L, K);
  Eigen::RowVectorXf decay(K);
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      decay = (a.G.row(i) - a.G.row(j)).array().exp();
      dqa.row(i) += Pq(i, j) * Kk.row(j).cwiseProduct(decay);
      r.row(i) += Pk(i, j) * Kk.row(j).cwiseProduct(decay);
      dkc.row(j) += (Pq(i, j) * Q.row(i) + (Pk(i, j) * a.beta(i)) * Kk.row(i)).cwiseProduct(decay);
    }
  }
  const Mat dkr = a.beta.asDiagonal() * r;
  db += r.cwiseProduct(Kk).rowwise().sum();
  dQ += dqa;
  dk += dkr + dkc;
  dg += Q.cwiseProduct(dqa) + Kk.cwiseProduct(dkr - dkc);

  // The reverse cumsum, then back through the gate and beta.
  for (int64_t i = L - 2; i >= 0; --i) dg.row(i) += dg.row(i + 1);
  for (int64_t k = 0; k < K; ++k) {
    double A = 0.0, bias = 0.0;
    for (int64_t i = 0; i < L; ++i) {
      A += static_cast<double>(dg(i, k)) * a.d_A_log(i, k);
      bias += static_cast<double>(dg(i, k)) * a.d_x(i, k);
    }
    dA_log[static_cast<size_t>(hv)] += A;
    if (p.use_gate_in_kernel && !p.dt_bias.empty_arg()) {
      ddt_bias[static_cast<size_t>(hv * K + k)] += bias;
    }
  }
  dg = dg.cwiseProduct(a.d_x);
  const Mat dbeta = db.cwiseProduct(a.d_beta_raw);
  scatter(p.dv_out, head_rows(p.dv_out, c.b, c.t0, L, hv, V), dv_out);
  scatter(p.dg, head_rows(p.dg, c.b, c.t0, L, hv, K), dg);
  scatter(p.dbeta, cpu::head_column(p.dbeta, c.b, c.t0, L, hv), dbeta);
  dq_sum += dQ;
  dk_sum += dk;
}

void run_unit(const P& p, const D& d, const ChunkTask& c, int64_t h, std::vector<double>& dA_log,
              std::vector<double>& ddt_bias) {
  const int64_t L = c.len, K = d.K, G = d.HV / d.H;
  using cpu::head_rows;
  Mat Q = gather(p.q, head_rows(p.q, c.b, c.t0, L, h, K));
  Mat Kk = gather(p.k, head_rows(p.k, c.b, c.t0, L, h, K));
  const Col q_inv = normalise_rows(Q, p.use_qk_l2norm_in_kernel);
  const Col k_inv = normalise_rows(Kk, p.use_qk_l2norm_in_kernel);
  Mat dq = Mat::Zero(L, K), dk = Mat::Zero(L, K);
  for (int64_t hv = h * G; hv < (h + 1) * G; ++hv) {
    value_head(p, d, c, hv, Q, Kk, dq, dk, dA_log, ddt_bias);
  }
  if (p.use_qk_l2norm_in_kernel) {  // dx = (dx̂ − x̂ (x̂ · dx̂)) / ||x||
    for (int64_t i = 0; i < L; ++i) {
      dq.row(i) = q_inv(i) * (dq.row(i) - Q.row(i) * Q.row(i).dot(dq.row(i)));
      dk.row(i) = k_inv(i) * (dk.row(i) - Kk.row(i) * Kk.row(i).dot(dk.row(i)));
    }
  }
  scatter(p.dq, head_rows(p.dq, c.b, c.t0, L, h, K), dq);
  scatter(p.dk, head_rows(p.dk, c.b, c.t0, L, h, K), dk);
}

}  // namespace

Status run_chunk_bwd_epilogue_cpu(const P& problem, const D& dims) {
  return epilogue::run_units(problem, dims, "cpu", run_unit);
}

}  // namespace kda::detail
