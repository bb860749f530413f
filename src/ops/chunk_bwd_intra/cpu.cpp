// cpu backend of chunk_bwd_intra: float32, std::threads over (chunk, value head) units. Each unit
// gathers its tiles from the strided views into contiguous float32 buffers (converting f16/bf16;
// dA only where j <= i, the rest left 0), then makes one pass over the pairs j <= i of the chunk:
// the decay D[i][j] = exp2(G[i] − G[j]) of each pair is taken once per channel, exactly (no
// factorization, so it is finite for any non-increasing gate) and serves steps 1, 2 and 5 at once.
// Step numbers match SPEC-chunk-bwd-intra.md and cpu-ref.
//
// Tile shapes per unit (L <= BT rows):  Q, Kk, G, dqa, r, dkc, incoming/outgoing dq dk dg: L x K
//                                        Pq, Pk: L x L    β, db: L

#include <cmath>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "core/chunk_plan.hpp"
#include "core/parallel_for.hpp"
#include "core/tile_io.hpp"
#include "ops/chunk_bwd_intra/backends.hpp"

namespace kda::detail {

namespace {

// One thread's buffers, reused across the units it takes.
struct Scratch {
  std::vector<float> Q, Kk, G;          // (L, K)
  std::vector<float> Pq, Pk;            // (L, L), zero where j > i
  std::vector<float> beta, db;          // (L)
  std::vector<float> dq, dk, dg;        // (L, K): incoming, then the outputs in place
  std::vector<float> dqa, r, dkc;       // (L, K)
  std::vector<float> decay, kd, u_row;  // (K)
};

using cpu::gather;

// Row i's entries j <= i of a [B, T, HV, BT] dA view into dst (L x L); the rest is zero.
void gather_lower_inclusive(const TensorView& t, const ChunkTask& chunk, int64_t hv,
                            std::vector<float>& dst) {
  const int64_t L = chunk.len;
  dst.assign(static_cast<size_t>(L * L), 0.0f);
  for (int64_t i = 0; i < L; ++i) {
    const cpu::TileRef row{offset_of(t, chunk.b, chunk.t0 + i, hv, 0), 1, 0, i + 1, t.strides[3]};
    cpu::gather_tile(t, row, dst.data() + i * L);
  }
}

void gather_inputs(const ChunkBwdIntraProblem& p, const ChunkBwdIntraDims& d,
                   const ChunkTask& chunk, int64_t hv, Scratch& s) {
  const int64_t hq = hv / (d.HV / d.H);  // GVA: value head hv reads query/key head hq
  const int64_t b = chunk.b, t0 = chunk.t0, L = chunk.len;
  using cpu::head_column;
  using cpu::head_rows;
  gather(p.q, head_rows(p.q, b, t0, L, hq, d.K), s.Q);
  gather(p.k, head_rows(p.k, b, t0, L, hq, d.K), s.Kk);
  gather(p.g, head_rows(p.g, b, t0, L, hv, d.K), s.G);
  gather(p.beta, head_column(p.beta, b, t0, L, hv), s.beta);
  gather_lower_inclusive(p.dAqk, chunk, hv, s.Pq);
  gather_lower_inclusive(p.dAkk, chunk, hv, s.Pk);
  gather(p.dq, head_rows(p.dq, b, t0, L, hv, d.K), s.dq);
  gather(p.dk, head_rows(p.dk, b, t0, L, hv, d.K), s.dk);
  gather(p.dg, head_rows(p.dg, b, t0, L, hv, d.K), s.dg);
  gather(p.db, head_column(p.db, b, t0, L, hv), s.db);
}

void compute_chunk(int64_t L, int64_t K, Scratch& s) {
  const auto n = static_cast<size_t>(L * K);
  s.dqa.assign(n, 0.0f);
  s.r.assign(n, 0.0f);
  s.dkc.assign(n, 0.0f);
  s.decay.resize(static_cast<size_t>(K));
  s.kd.resize(static_cast<size_t>(K));
  s.u_row.resize(static_cast<size_t>(K));
  // Steps 1, 2, 5 over the pairs j <= i:
  //   dqa[i] += Pq[i][j] · Kk[j] ⊙ D,  r[i] += Pk[i][j] · Kk[j] ⊙ D,
  //   dkc[j] += (Pq[i][j] · Q[i] + Pk[i][j] · β[i] · Kk[i]) ⊙ D,  D = exp2(G[i] − G[j]).
  for (int64_t i = 0; i < L; ++i) {
    const float* Gi = &s.G[i * K];
    const float* Qi = &s.Q[i * K];
    const float* Ki = &s.Kk[i * K];
    float* dqa_i = &s.dqa[i * K];
    float* r_i = &s.r[i * K];
    const float beta_i = s.beta[i];
    for (int64_t j = 0; j <= i; ++j) {
      const float pq = s.Pq[i * L + j];
      const float pk = s.Pk[i * L + j];
      const float* Gj = &s.G[j * K];
      const float* Kj = &s.Kk[j * K];
      float* dkc_j = &s.dkc[j * K];
      for (int64_t c = 0; c < K; ++c) {
        const float D = std::exp2(Gi[c] - Gj[c]);
        const float kd = Kj[c] * D;
        dqa_i[c] += pq * kd;
        r_i[c] += pk * kd;
        dkc_j[c] += (pq * Qi[c] + pk * (beta_i * Ki[c])) * D;
      }
    }
  }
  for (int64_t i = 0; i < L; ++i) {
    const float beta_i = s.beta[i];
    float db_sum = 0.0f;
    for (int64_t c = 0; c < K; ++c) {
      const int64_t e = i * K + c;
      db_sum += s.r[e] * s.Kk[e];                                 // step 3
      const float dkr = beta_i * s.r[e];                          // step 4
      s.dq[e] += s.dqa[e];                                        // step 6
      s.dk[e] += dkr + s.dkc[e];                                  // step 7
      s.dg[e] += s.Q[e] * s.dqa[e] + s.Kk[e] * (dkr - s.dkc[e]);  // step 8
    }
    s.db[i] += db_sum;
  }
}

void scatter_outputs(const ChunkBwdIntraProblem& p, const ChunkBwdIntraDims& d,
                     const ChunkTask& chunk, int64_t hv, const Scratch& s) {
  const int64_t b = chunk.b, t0 = chunk.t0, L = chunk.len;
  using cpu::head_rows;
  cpu::scatter_tile(p.dq_out, head_rows(p.dq_out, b, t0, L, hv, d.K), s.dq.data());
  cpu::scatter_tile(p.dk_out, head_rows(p.dk_out, b, t0, L, hv, d.K), s.dk.data());
  cpu::scatter_tile(p.dg_out, head_rows(p.dg_out, b, t0, L, hv, d.K), s.dg.data());
  cpu::scatter_tile(p.db_out, cpu::head_column(p.db_out, b, t0, L, hv), s.db.data());
}

}  // namespace

Status run_chunk_bwd_intra_cpu(const ChunkBwdIntraProblem& problem, const ChunkBwdIntraDims& dims) {
  try {
    const std::vector<ChunkTask> chunks = plan_chunks(problem.cu_seqlens, dims);
    cpu::parallel_for_chunk_heads<Scratch>(
        chunks, dims.HV, [&](const ChunkTask& chunk, int64_t hv, Scratch& scratch) {
          gather_inputs(problem, dims, chunk, hv, scratch);
          compute_chunk(chunk.len, dims.K, scratch);
          scatter_outputs(problem, dims, chunk, hv, scratch);
        });
  } catch (const std::exception& e) {
    return {StatusCode::internal, std::string("cpu: ") + e.what()};
  }
  return Status::Ok();
}

}  // namespace kda::detail
