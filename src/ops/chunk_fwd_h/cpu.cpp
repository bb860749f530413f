// cpu backend of chunk_fwd_h: the forward state scan of cpu-ref (reference.cpp) in float32,
// std::threads over (sequence, value head) units; each unit walks its sequence's chunks from the
// first to the last, as the CUDA kernel and fla do. Roundings where fla's kernel has them: the
// state S is stored to h in X and enters w·S rounded to X (b_h.to(b_w.dtype)); v_new = u − w·S
// is stored in X; the gated x = 2^(g_last − g) v_new, taken from v_new before its rounding, enters
// kᵀ·x rounded to X (b_v.to(k.dtype)); everything else is float32 (the gates, the decays, the
// sums, S itself, final_state).
//
// Buffers per unit (L <= BT rows):  S, Sx: K x V    Kk, W: L x K    x: L x V    g: L
//                                    gk_last: K      wS: V

#include <cmath>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "core/chunk_plan.hpp"
#include "core/parallel_for.hpp"
#include "core/tile_io.hpp"
#include "ops/chunk_fwd_h/backends.hpp"

namespace kda::detail {

namespace {

using P = ChunkFwdHProblem;
using Dims = ChunkFwdHDims;

// One thread's buffers, reused across the units it takes.
struct Scratch {
  std::vector<float> S, Sx;    // (K, V): the state, and the state rounded to X
  std::vector<float> Kk, W;    // (L, K)
  std::vector<float> x;        // (L, V): u, then v_new, then the gated x in place
  std::vector<float> g;        // (L)
  std::vector<float> gk_last;  // (K)
  std::vector<float> wS;       // (V): one row's w·Sx
};

using cpu::gather;
using cpu::round_to;
using cpu::sequence_state;

// One chunk of the scan: h[c] = S; v_new = u − w·Sx; x = 2^(g_last − g) v_new rounded to X;
// then S = 2^(g_last) 2^(gk_last) ⊙ S + kᵀ x.
void scan_chunk(const P& p, const Dims& d, const ChunkTask& c, int64_t hv, Scratch& s) {
  const int64_t L = c.len, K = d.K, V = d.V, h = hv / (d.HV / d.H);
  const auto KV = static_cast<size_t>(K * V);
  using cpu::head_rows;
  cpu::scatter_tile(p.h, cpu::state_tile(p.h, c.h_batch, c.h_chunk, hv, K, V, p.state_v_first),
                    s.S.data());
  s.Sx.resize(KV);
  for (size_t e = 0; e < KV; ++e) s.Sx[e] = round_to(d.x_dtype, s.S[e]);

  gather(p.k, head_rows(p.k, c.b, c.t0, L, h, K), s.Kk);
  gather(p.w, head_rows(p.w, c.b, c.t0, L, hv, K), s.W);
  gather(p.u, head_rows(p.u, c.b, c.t0, L, hv, V), s.x);  // u, then v_new and x in place
  s.g.assign(static_cast<size_t>(L), 0.0f);
  if (d.use_g) gather(p.g, cpu::head_column(p.g, c.b, c.t0, L, hv), s.g);
  const float g_last = s.g[static_cast<size_t>(L - 1)];
  s.gk_last.assign(static_cast<size_t>(K), 0.0f);
  if (d.use_gk) gather(p.gk, head_rows(p.gk, c.b, c.t0 + L - 1, 1, hv, K), s.gk_last);

  // v_new = u − w·Sx, stored in X.
  for (int64_t r = 0; r < L; ++r) {
    s.wS.assign(static_cast<size_t>(V), 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float a = s.W[r * K + k];
      const float* Sx_k = &s.Sx[k * V];
      for (int64_t v = 0; v < V; ++v) s.wS[v] += a * Sx_k[v];
    }
    float* x_r = &s.x[r * V];
    for (int64_t v = 0; v < V; ++v) x_r[v] -= s.wS[v];
  }
  cpu::scatter_tile(p.v_new, head_rows(p.v_new, c.b, c.t0, L, hv, V), s.x.data());

  // x = 2^(g_last − g) v_new (v_new in float32), rounded to X: what kᵀ·x reads.
  for (int64_t r = 0; r < L; ++r) {
    const float factor = d.use_g ? std::exp2(g_last - s.g[r]) : 1.0f;
    float* x_r = &s.x[r * V];
    for (int64_t v = 0; v < V; ++v) x_r[v] = round_to(d.x_dtype, factor * x_r[v]);
  }

  // S = decay ⊙ S, then plus kᵀ x summed over the chunk's rows (fla's dot accumulates into the
  // decayed state).
  const float g_decay = d.use_g ? std::exp2(g_last) : 1.0f;
  for (int64_t k = 0; k < K; ++k) {
    const float decay = g_decay * (d.use_gk ? std::exp2(s.gk_last[k]) : 1.0f);
    float* S_k = &s.S[k * V];
    for (int64_t v = 0; v < V; ++v) S_k[v] *= decay;
  }
  for (int64_t r = 0; r < L; ++r) {
    const float* x_r = &s.x[r * V];
    for (int64_t k = 0; k < K; ++k) {
      const float a = s.Kk[r * K + k];
      float* S_k = &s.S[k * V];
      for (int64_t v = 0; v < V; ++v) S_k[v] += a * x_r[v];
    }
  }
}

// One (sequence, value head): S from initial_state (or 0), the sequence's chunks first to last,
// then final_state.
void scan_sequence(const P& p, const Dims& d, const std::vector<ChunkTask>& tasks,
                   SequenceChunks chunks, int64_t n, int64_t hv, Scratch& s) {
  const int64_t K = d.K, V = d.V;
  s.S.assign(static_cast<size_t>(K * V), 0.0f);
  if (!p.initial_state.empty_arg()) {
    gather(p.initial_state, sequence_state(p.initial_state, n, hv, K, V, p.state_v_first), s.S);
  }
  for (int64_t i = chunks.begin; i < chunks.end; ++i) {
    scan_chunk(p, d, tasks[static_cast<size_t>(i)], hv, s);
  }
  cpu::scatter_tile(p.final_state, sequence_state(p.final_state, n, hv, K, V, p.state_v_first),
                    s.S.data());
}

}  // namespace

Status run_chunk_fwd_h_cpu(const P& problem, const Dims& dims) {
  try {
    const std::vector<ChunkTask> tasks = plan_chunks(problem.cu_seqlens, dims);
    const std::vector<SequenceChunks> sequences = chunks_by_sequence(tasks, dims.num_seqs);
    cpu::parallel_for_units<Scratch>(dims.num_seqs * dims.HV, [&](int64_t unit, Scratch& s) {
      const int64_t n = unit / dims.HV, hv = unit % dims.HV;
      scan_sequence(problem, dims, tasks, sequences[static_cast<size_t>(n)], n, hv, s);
    });
  } catch (const std::exception& e) {
    return {StatusCode::internal, std::string("cpu: ") + e.what()};
  }
  return Status::Ok();
}

}  // namespace kda::detail
