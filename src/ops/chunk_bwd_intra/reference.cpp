// cpu-ref of chunk_bwd_intra: SPEC-chunk-bwd-intra.md's math in float64 with plain loops, one
// function per step, so that each line can be checked against the SPEC. Every other backend is
// judged against this one. safe_gate changes nothing mathematically and is ignored.
//
// Per chunk (rows t0 .. t0+L-1) and value head hv, with i, j row indices in [0, L):
//   the chunk's tiles are gathered from the strided input views into small row-major float64
//   matrices (dA only where j <= i: nothing else of dAqk, dAkk is read), steps 1..8 run on them,
//   and the four outputs are stored row by row (rounded to float32).

#include <cmath>
#include <cstdint>
#include <exception>
#include <string>

#include "core/chunk_plan.hpp"
#include "core/element.hpp"
#include "core/parallel_for.hpp"
#include "core/reference_matrix.hpp"
#include "ops/chunk_bwd_intra/backends.hpp"

namespace kda::detail {

namespace {

using reference::load_rows;
using reference::Matrix;
using reference::store_rows;

// The SPEC names of one (chunk, value head)'s inputs.
struct ChunkInputs {
  int64_t L = 0;  // rows in the chunk
  Matrix Q;       // L x K  q at head hq = hv / (HV/H)
  Matrix Kk;      // L x K  k at head hq
  Matrix G;       // L x K  cumulative gate, log2 space
  Matrix beta;    // L x 1
  Matrix Pq;      // L x L  dAqk where j <= i, else 0
  Matrix Pk;      // L x L  dAkk where j <= i, else 0
  Matrix dq_in;   // L x K
  Matrix dk_in;   // L x K
  Matrix db_in;   // L x 1
  Matrix dg_in;   // L x K
};

struct ChunkResults {
  Matrix dqa;  // L x K  step 1
  Matrix r;    // L x K  step 2
  Matrix db;   // L x 1  step 3
  Matrix dkr;  // L x K  step 4
  Matrix dkc;  // L x K  step 5
  Matrix dq;   // L x K  step 6
  Matrix dk;   // L x K  step 7
  Matrix dg;   // L x K  step 8
};

// --- gathering the inputs -----------------------------------------------------------------------

// Rows t0 .. t0+L-1 of head `head` of a [B, T, heads] view, as an L x 1 matrix.
Matrix load_column(const TensorView& t, int64_t b, int64_t t0, int64_t L, int64_t head) {
  Matrix m(L, 1);
  for (int64_t i = 0; i < L; ++i) m(i, 0) = load_double(t, offset_of(t, b, t0 + i, head));
  return m;
}

// The lower-inclusive part of a [B, T, HV, BT] dA view for one chunk: entries j > i (and so every
// column j >= L) are not read and stay 0.
Matrix load_lower_inclusive(const TensorView& t, int64_t b, int64_t t0, int64_t L, int64_t hv) {
  Matrix m(L, L);
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j <= i; ++j) m(i, j) = load_double(t, offset_of(t, b, t0 + i, hv, j));
  }
  return m;
}

ChunkInputs load_inputs(const ChunkBwdIntraProblem& p, const ChunkBwdIntraDims& d,
                        const ChunkTask& chunk, int64_t hv) {
  const int64_t hq = hv / (d.HV / d.H);  // GVA: value head hv reads query/key head hq
  const int64_t b = chunk.b, t0 = chunk.t0, L = chunk.len;
  ChunkInputs in;
  in.L = L;
  in.Q = load_rows(p.q, b, t0, L, hq, d.K);
  in.Kk = load_rows(p.k, b, t0, L, hq, d.K);
  in.G = load_rows(p.g, b, t0, L, hv, d.K);
  in.beta = load_column(p.beta, b, t0, L, hv);
  in.Pq = load_lower_inclusive(p.dAqk, b, t0, L, hv);
  in.Pk = load_lower_inclusive(p.dAkk, b, t0, L, hv);
  in.dq_in = load_rows(p.dq, b, t0, L, hv, d.K);
  in.dk_in = load_rows(p.dk, b, t0, L, hv, d.K);
  in.db_in = load_column(p.db, b, t0, L, hv);
  in.dg_in = load_rows(p.dg, b, t0, L, hv, d.K);
  return in;
}

// --- steps 1..8 -------------------------------------------------------------------------------

// D[i][j] = exp2(G[i] − G[j]) at channel c (used only where j <= i).
double decay(const ChunkInputs& in, int64_t i, int64_t j, int64_t c) {
  return std::exp2(in.G(i, c) - in.G(j, c));
}

// Σ_{j<=i} P[i][j] · (Kk[j] ⊙ D[i][j]): steps 1 and 2, with P = Pq and Pk.
Matrix lower_decayed_product(const ChunkInputs& in, const Matrix& P) {
  Matrix out(in.L, in.Kk.cols);
  for (int64_t i = 0; i < in.L; ++i) {
    for (int64_t c = 0; c < in.Kk.cols; ++c) {
      double sum = 0.0;
      for (int64_t j = 0; j <= i; ++j) sum += P(i, j) * in.Kk(j, c) * decay(in, i, j, c);
      out(i, c) = sum;
    }
  }
  return out;
}

// Step 1: dqa[i] = Σ_{j<=i} Pq[i][j] · (Kk[j] ⊙ D[i][j])
Matrix step1_dqa(const ChunkInputs& in) {
  return lower_decayed_product(in, in.Pq);
}

// Step 2: r[i] = Σ_{j<=i} Pk[i][j] · (Kk[j] ⊙ D[i][j])
Matrix step2_r(const ChunkInputs& in) {
  return lower_decayed_product(in, in.Pk);
}

// Step 3: db[i] = db_in[i] + Σ_c r[i,c] · Kk[i,c]
Matrix step3_db(const ChunkInputs& in, const ChunkResults& r) {
  Matrix db(in.L, 1);
  for (int64_t i = 0; i < in.L; ++i) {
    double sum = 0.0;
    for (int64_t c = 0; c < in.Kk.cols; ++c) sum += r.r(i, c) * in.Kk(i, c);
    db(i, 0) = in.db_in(i, 0) + sum;
  }
  return db;
}

// Step 4: dkr[i] = β[i] · r[i]
Matrix step4_dkr(const ChunkInputs& in, const ChunkResults& r) {
  Matrix dkr(in.L, in.Kk.cols);
  for (int64_t i = 0; i < in.L; ++i) {
    for (int64_t c = 0; c < in.Kk.cols; ++c) dkr(i, c) = in.beta(i, 0) * r.r(i, c);
  }
  return dkr;
}

// Step 5: dkc[i] = Σ_{j>=i} (Pq[j][i] · Q[j] + Pk[j][i] · β[j] · Kk[j]) ⊙ D[j][i]
Matrix step5_dkc(const ChunkInputs& in) {
  Matrix dkc(in.L, in.Kk.cols);
  for (int64_t i = 0; i < in.L; ++i) {
    for (int64_t c = 0; c < in.Kk.cols; ++c) {
      double sum = 0.0;
      for (int64_t j = i; j < in.L; ++j) {
        const double u = in.Pq(j, i) * in.Q(j, c) + in.Pk(j, i) * in.beta(j, 0) * in.Kk(j, c);
        sum += u * decay(in, j, i, c);
      }
      dkc(i, c) = sum;
    }
  }
  return dkc;
}

// Step 6: dq = dq_in + dqa
Matrix step6_dq(const ChunkInputs& in, const ChunkResults& r) {
  Matrix dq(in.L, in.Kk.cols);
  for (int64_t i = 0; i < in.L; ++i) {
    for (int64_t c = 0; c < in.Kk.cols; ++c) dq(i, c) = in.dq_in(i, c) + r.dqa(i, c);
  }
  return dq;
}

// Step 7: dk = dk_in + dkr + dkc
Matrix step7_dk(const ChunkInputs& in, const ChunkResults& r) {
  Matrix dk(in.L, in.Kk.cols);
  for (int64_t i = 0; i < in.L; ++i) {
    for (int64_t c = 0; c < in.Kk.cols; ++c) {
      dk(i, c) = in.dk_in(i, c) + r.dkr(i, c) + r.dkc(i, c);
    }
  }
  return dk;
}

// Step 8: dg = dg_in + Q ⊙ dqa + Kk ⊙ (dkr − dkc)
Matrix step8_dg(const ChunkInputs& in, const ChunkResults& r) {
  Matrix dg(in.L, in.Kk.cols);
  for (int64_t i = 0; i < in.L; ++i) {
    for (int64_t c = 0; c < in.Kk.cols; ++c) {
      dg(i, c) =
          in.dg_in(i, c) + in.Q(i, c) * r.dqa(i, c) + in.Kk(i, c) * (r.dkr(i, c) - r.dkc(i, c));
    }
  }
  return dg;
}

ChunkResults compute_chunk(const ChunkInputs& in) {
  ChunkResults r;
  r.dqa = step1_dqa(in);
  r.r = step2_r(in);
  r.db = step3_db(in, r);
  r.dkr = step4_dkr(in, r);
  r.dkc = step5_dkc(in);
  r.dq = step6_dq(in, r);
  r.dk = step7_dk(in, r);
  r.dg = step8_dg(in, r);
  return r;
}

// --- storing the outputs ----------------------------------------------------------------------

void store_outputs(const ChunkBwdIntraProblem& p, const ChunkTask& chunk, int64_t hv,
                   const ChunkResults& r) {
  store_rows(p.dq_out, chunk.b, chunk.t0, hv, r.dq);
  store_rows(p.dk_out, chunk.b, chunk.t0, hv, r.dk);
  store_rows(p.dg_out, chunk.b, chunk.t0, hv, r.dg);
  for (int64_t i = 0; i < chunk.len; ++i) {
    store_float(p.db_out, offset_of(p.db_out, chunk.b, chunk.t0 + i, hv),
                static_cast<float>(r.db(i, 0)));
  }
}

}  // namespace

Status run_chunk_bwd_intra_cpu_ref(const ChunkBwdIntraProblem& problem,
                                   const ChunkBwdIntraDims& dims) {
  try {
    // Every (chunk, value head) on its own, on the machine's threads (the same bits as in order).
    cpu::parallel_for_chunk_heads<cpu::NoScratch>(
        plan_chunks(problem.cu_seqlens, dims), dims.HV,
        [&](const ChunkTask& chunk, int64_t hv, cpu::NoScratch&) {
          store_outputs(problem, chunk, hv, compute_chunk(load_inputs(problem, dims, chunk, hv)));
        });
  } catch (const std::exception& e) {  // std::bad_alloc: the library returns errors, never throws
    return {StatusCode::internal, std::string("cpu-ref: ") + e.what()};
  }
  return Status::Ok();
}

}  // namespace kda::detail
