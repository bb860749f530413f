// cpu-ref: SPEC.md's math in float64 with plain loops, one function per step, so a reader can
// check each line against the spec. Every other backend is judged against this one.
//
// Per chunk (rows t0 .. t0+L-1) and value head hv, with i, j row indices in [0, L):
//   tiles are gathered from the strided input views into small row-major float64 matrices,
//   steps 1..12 run on them, and the outputs are stored row by row (rounded to their dtype).

#include <cmath>
#include <cstdint>
#include <exception>
#include <string>

#include "core/chunk_plan.hpp"
#include "core/element.hpp"
#include "core/parallel_for.hpp"
#include "core/reference_matrix.hpp"
#include "ops/chunk_bwd_wy_dqkg/backends.hpp"

namespace kda::detail {

namespace {

using reference::load_rows;
using reference::Matrix;
using reference::store_rows;

// The SPEC names of one (chunk, value head)'s inputs.
struct ChunkInputs {
  int64_t L = 0;  // rows in the chunk
  Matrix Q;       // L x K  (query head hq)
  Matrix Kk;      // L x K  (key head hq)
  Matrix G;       // L x K  cumulative gate, log2 space
  Matrix E;       // L x K  exp2(G)
  Matrix gn;      // 1 x K  G[L-1]
  Matrix beta;    // L x 1
  Matrix Vv;      // L x V
  Matrix Vn;      // L x V  v_new
  Matrix dO;      // L x V
  Matrix dV;      // L x V
  Matrix Abar;    // L x L  A as stored, only its first L columns
  Matrix S;       // K x V  h[chunk, hv]
  Matrix dS;      // K x V  dh[chunk, hv]
};

// Everything steps 1..12 produce for one (chunk, value head).
struct ChunkResults {
  Matrix dQ;      // L x K  step 1 (= dq, step 10)
  Matrix dK0;     // L x K  step 2
  Matrix dW;      // L x K  step 3
  Matrix dvb;     // L x V  step 4
  Matrix dv_out;  // L x V  step 4
  Matrix KG;      // L x K  step 5
  Matrix dkgb;    // L x K  step 5
  Matrix db;      // L x 1  step 6
  Matrix dk;      // L x K  step 7
  Matrix dgk;     // 1 x K  step 8
  Matrix dg;      // L x K  step 9
  Matrix X;       // L x L  step 11
  Matrix dA;      // L x L  step 12 (columns L..BT-1 of the output are 0)
};

// --- gathering the inputs -----------------------------------------------------------------------

// The K x V state of one chunk and value head (h/dh, either layout).
Matrix load_state(const TensorView& t, const ChunkTask& task, int64_t hv, int64_t K, int64_t V,
                  bool state_v_first) {
  return reference::load_state(t, task.h_batch, task.h_chunk, hv, K, V, state_v_first);
}

ChunkInputs load_inputs(const ChunkBwdWyDqkgProblem& p, const ChunkBwdWyDqkgDims& d,
                        const ChunkTask& task, int64_t hv) {
  const int64_t hq = hv / (d.HV / d.H);  // GVA: value head hv reads query/key head hq
  const int64_t L = task.len;
  ChunkInputs in;
  in.L = L;
  in.Q = load_rows(p.q, task.b, task.t0, L, hq, d.K);
  in.Kk = load_rows(p.k, task.b, task.t0, L, hq, d.K);
  in.G = load_rows(p.g, task.b, task.t0, L, hv, d.K);
  in.E = Matrix(L, d.K);
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t k = 0; k < d.K; ++k) in.E(i, k) = std::exp2(in.G(i, k));
  }
  in.gn = Matrix(1, d.K);
  for (int64_t k = 0; k < d.K; ++k) in.gn(0, k) = in.G(L - 1, k);
  in.beta = Matrix(L, 1);
  for (int64_t i = 0; i < L; ++i) {
    in.beta(i, 0) = load_double(p.beta, offset_of(p.beta, task.b, task.t0 + i, hv));
  }
  in.Vv = load_rows(p.v, task.b, task.t0, L, hv, d.V);
  in.Vn = load_rows(p.v_new, task.b, task.t0, L, hv, d.V);
  in.dO = load_rows(p.do_, task.b, task.t0, L, hv, d.V);
  in.dV = load_rows(p.dv, task.b, task.t0, L, hv, d.V);
  in.Abar = load_rows(p.A, task.b, task.t0, L, hv, L);  // no mask; columns >= L unread
  in.S = load_state(p.h, task, hv, d.K, d.V, p.state_v_first);
  in.dS = load_state(p.dh, task, hv, d.K, d.V, p.state_v_first);
  return in;
}

// --- steps 1..12 ------------------------------------------------------------------------------

// Step 1: dQ = (dO · Sᵀ) ⊙ E · scale
Matrix step1_dQ(const ChunkInputs& in, double scale) {
  Matrix dQ(in.L, in.S.rows);
  for (int64_t i = 0; i < in.L; ++i) {
    for (int64_t k = 0; k < in.S.rows; ++k) {
      double sum = 0.0;
      for (int64_t v = 0; v < in.S.cols; ++v) sum += in.dO(i, v) * in.S(k, v);
      dQ(i, k) = sum * in.E(i, k) * scale;
    }
  }
  return dQ;
}

// Step 2: dK0 = (Vn · dSᵀ) ⊙ exp2(gn − G)
Matrix step2_dK0(const ChunkInputs& in) {
  Matrix dK0(in.L, in.dS.rows);
  for (int64_t i = 0; i < in.L; ++i) {
    for (int64_t k = 0; k < in.dS.rows; ++k) {
      double sum = 0.0;
      for (int64_t v = 0; v < in.dS.cols; ++v) sum += in.Vn(i, v) * in.dS(k, v);
      dK0(i, k) = sum * std::exp2(in.gn(0, k) - in.G(i, k));
    }
  }
  return dK0;
}

// Step 3: dW = −(dV · Sᵀ)
Matrix step3_dW(const ChunkInputs& in) {
  Matrix dW(in.L, in.S.rows);
  for (int64_t i = 0; i < in.L; ++i) {
    for (int64_t k = 0; k < in.S.rows; ++k) {
      double sum = 0.0;
      for (int64_t v = 0; v < in.S.cols; ++v) sum += in.dV(i, v) * in.S(k, v);
      dW(i, k) = -sum;
    }
  }
  return dW;
}

// Āᵀ · M for an L-row matrix M: (Āᵀ · M)[i][c] = Σ_j Ā[j][i] · M[j][c]. Used by steps 4 and 5.
Matrix abar_transposed_times(const Matrix& Abar, const Matrix& M) {
  Matrix out(M.rows, M.cols);
  for (int64_t i = 0; i < M.rows; ++i) {
    for (int64_t c = 0; c < M.cols; ++c) {
      double sum = 0.0;
      for (int64_t j = 0; j < M.rows; ++j) sum += Abar(j, i) * M(j, c);
      out(i, c) = sum;
    }
  }
  return out;
}

// Step 4: dvb = Āᵀ · dV;  dv_out = β ⊙ dvb (β scales rows)
void step4_dvb_dv_out(const ChunkInputs& in, ChunkResults& r) {
  r.dvb = abar_transposed_times(in.Abar, in.dV);
  r.dv_out = Matrix(in.L, in.dV.cols);
  for (int64_t i = 0; i < in.L; ++i) {
    for (int64_t v = 0; v < in.dV.cols; ++v) r.dv_out(i, v) = in.beta(i, 0) * r.dvb(i, v);
  }
}

// Step 5: KG = Kk ⊙ E;  dkgb = Āᵀ · dW
void step5_KG_dkgb(const ChunkInputs& in, ChunkResults& r) {
  r.KG = Matrix(in.L, in.Kk.cols);
  for (int64_t i = 0; i < in.L; ++i) {
    for (int64_t k = 0; k < in.Kk.cols; ++k) r.KG(i, k) = in.Kk(i, k) * in.E(i, k);
  }
  r.dkgb = abar_transposed_times(in.Abar, r.dW);
}

// Step 6: db = rowsum(dvb ⊙ Vv) + rowsum(dkgb ⊙ KG)
Matrix step6_db(const ChunkInputs& in, const ChunkResults& r) {
  Matrix db(in.L, 1);
  for (int64_t i = 0; i < in.L; ++i) {
    double sum = 0.0;
    for (int64_t v = 0; v < in.Vv.cols; ++v) sum += r.dvb(i, v) * in.Vv(i, v);
    for (int64_t k = 0; k < r.KG.cols; ++k) sum += r.dkgb(i, k) * r.KG(i, k);
    db(i, 0) = sum;
  }
  return db;
}

// Step 7: dk = dK0 + dkgb ⊙ E ⊙ β
Matrix step7_dk(const ChunkInputs& in, const ChunkResults& r) {
  Matrix dk(in.L, in.E.cols);
  for (int64_t i = 0; i < in.L; ++i) {
    for (int64_t k = 0; k < in.E.cols; ++k) {
      dk(i, k) = r.dK0(i, k) + r.dkgb(i, k) * in.E(i, k) * in.beta(i, 0);
    }
  }
  return dk;
}

// Step 8: dgk = exp2(gn) ⊙ Σ_v (S ⊙ dS)[:, v] + Σ_i (Kk ⊙ dK0)[i, :]   (a K-vector)
Matrix step8_dgk(const ChunkInputs& in, const ChunkResults& r) {
  Matrix dgk(1, in.S.rows);
  for (int64_t k = 0; k < in.S.rows; ++k) {
    double state_sum = 0.0;
    for (int64_t v = 0; v < in.S.cols; ++v) state_sum += in.S(k, v) * in.dS(k, v);
    double key_sum = 0.0;
    for (int64_t i = 0; i < in.L; ++i) key_sum += in.Kk(i, k) * r.dK0(i, k);
    dgk(0, k) = std::exp2(in.gn(0, k)) * state_sum + key_sum;
  }
  return dgk;
}

// Step 9: dg = Q ⊙ dQ − Kk ⊙ dK0 + KG ⊙ dkgb ⊙ β, then dg[L−1] += dgk
Matrix step9_dg(const ChunkInputs& in, const ChunkResults& r) {
  Matrix dg(in.L, in.Q.cols);
  for (int64_t i = 0; i < in.L; ++i) {
    for (int64_t k = 0; k < in.Q.cols; ++k) {
      dg(i, k) = in.Q(i, k) * r.dQ(i, k) - in.Kk(i, k) * r.dK0(i, k) +
                 r.KG(i, k) * r.dkgb(i, k) * in.beta(i, 0);
    }
  }
  for (int64_t k = 0; k < in.Q.cols; ++k) dg(in.L - 1, k) += r.dgk(0, k);
  return dg;
}

// Step 10: dq = dQ (stored by store_outputs from r.dQ).

// Step 11: D = dV · Vvᵀ + dW · KGᵀ (L x L);  X[i][j] = D[i][j] · β[j] where i > j, else 0
Matrix step11_X(const ChunkInputs& in, const ChunkResults& r) {
  Matrix X(in.L, in.L);
  for (int64_t i = 0; i < in.L; ++i) {
    for (int64_t j = 0; j < i; ++j) {
      double D = 0.0;
      for (int64_t v = 0; v < in.Vv.cols; ++v) D += in.dV(i, v) * in.Vv(j, v);
      for (int64_t k = 0; k < r.KG.cols; ++k) D += r.dW(i, k) * r.KG(j, k);
      X(i, j) = D * in.beta(j, 0);
    }
  }
  return X;
}

// Step 12: dA[i][j] = −(Āᵀ · X · Āᵀ)[i][j] where i > j, else 0
Matrix step12_dA(const ChunkInputs& in, const ChunkResults& r) {
  const Matrix AtX = abar_transposed_times(in.Abar, r.X);  // Āᵀ · X
  Matrix dA(in.L, in.L);
  for (int64_t i = 0; i < in.L; ++i) {
    for (int64_t j = 0; j < i; ++j) {
      double sum = 0.0;
      for (int64_t n = 0; n < in.L; ++n) sum += AtX(i, n) * in.Abar(j, n);  // Āᵀ[n][j] = Ā[j][n]
      dA(i, j) = -sum;
    }
  }
  return dA;
}

ChunkResults compute_chunk(const ChunkInputs& in, double scale) {
  ChunkResults r;
  r.dQ = step1_dQ(in, scale);
  r.dK0 = step2_dK0(in);
  r.dW = step3_dW(in);
  step4_dvb_dv_out(in, r);
  step5_KG_dkgb(in, r);
  r.db = step6_db(in, r);
  r.dk = step7_dk(in, r);
  r.dgk = step8_dgk(in, r);
  r.dg = step9_dg(in, r);
  r.X = step11_X(in, r);
  r.dA = step12_dA(in, r);
  return r;
}

// --- storing the outputs ----------------------------------------------------------------------

void store_outputs(const ChunkBwdWyDqkgProblem& p, const ChunkBwdWyDqkgDims& d,
                   const ChunkTask& task, int64_t hv, const ChunkResults& r) {
  store_rows(p.dq, task.b, task.t0, hv, r.dQ);  // step 10
  store_rows(p.dk, task.b, task.t0, hv, r.dk);
  store_rows(p.dv_out, task.b, task.t0, hv, r.dv_out);
  store_rows(p.dg, task.b, task.t0, hv, r.dg);
  for (int64_t i = 0; i < task.len; ++i) {
    store_float(p.db, offset_of(p.db, task.b, task.t0 + i, hv), static_cast<float>(r.db(i, 0)));
    // Every one of the BT columns of the row is written: columns >= L of a short chunk are 0.
    for (int64_t j = 0; j < d.BT; ++j) {
      const double value = j < task.len ? r.dA(i, j) : 0.0;
      store_float(p.dA, offset_of(p.dA, task.b, task.t0 + i, hv, j), static_cast<float>(value));
    }
  }
}

}  // namespace

Status run_chunk_bwd_wy_dqkg_cpu_ref(const ChunkBwdWyDqkgProblem& problem,
                                     const ChunkBwdWyDqkgDims& dims) {
  try {
    const double scale = problem.effective_scale();
    // Every (chunk, value head) on its own, on the machine's threads (the same bits as in order).
    cpu::parallel_for_chunk_heads<cpu::NoScratch>(
        plan_chunks(problem.cu_seqlens, dims), dims.HV,
        [&](const ChunkTask& task, int64_t hv, cpu::NoScratch&) {
          const ChunkInputs in = load_inputs(problem, dims, task, hv);
          store_outputs(problem, dims, task, hv, compute_chunk(in, scale));
        });
  } catch (const std::exception& e) {  // std::bad_alloc: the library returns errors, never throws
    return {StatusCode::internal, std::string("cpu-ref: ") + e.what()};
  }
  return Status::Ok();
}

}  // namespace kda::detail
