// cpu backend of chunk_bwd_dhu: the reverse state scan of cpu-ref (reference.cpp) in float32,
// std::threads over (sequence, value head) units; each unit walks its sequence's chunks from the
// last to the first, as the CUDA kernel and fla do. Roundings where fla's kernel has them: the
// state D is stored to dh in X and enters k·D rounded to X (b_dh.to(b_k.dtype)); dv2 is stored
// in X and enters wᵀ·dv2 as stored (b_dv.to(b_w.dtype)); everything else is float32 (the gated
// q, the decays, the sums, D itself, dh0).
//
// Buffers per unit (L <= BT rows):  D, Dx, update: K x V    Q, Kk, W: L x K    dO, dv2: L x V
//                                    g: L    gk_last: K    kD: V

#include <cmath>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "core/chunk_plan.hpp"
#include "core/parallel_for.hpp"
#include "core/tile_io.hpp"
#include "ops/chunk_bwd_dhu/backends.hpp"

namespace kda::detail {

namespace {

using P = ChunkBwdDhuProblem;
using Dims = ChunkBwdDhuDims;

// One thread's buffers, reused across the units it takes.
struct Scratch {
  std::vector<float> D, Dx,
      update;                   // (K, V): the state's gradient, D rounded to X, the chunk's sum
  std::vector<float> Q, Kk, W;  // (L, K)
  std::vector<float> dO, dv2;   // (L, V)
  std::vector<float> g;         // (L)
  std::vector<float> gk_last;   // (K)
  std::vector<float> kD;        // (V): one row's k·Dx
};

using cpu::gather;
using cpu::round_to;
using cpu::sequence_state;

// One chunk of the scan: dh[c] = D; dv2 = dv + 2^(g_last - g) k·Dx; then
// D = 2^(g_last) 2^(gk_last) ⊙ D + scale (2^g q)ᵀ do − wᵀ dv2 (dv2 as stored).
void scan_chunk(const P& p, const Dims& d, const ChunkTask& c, int64_t hv, Scratch& s) {
  const int64_t L = c.len, K = d.K, V = d.V, h = hv / (d.HV / d.H);
  const auto KV = static_cast<size_t>(K * V);
  using cpu::head_rows;
  cpu::scatter_tile(p.dh, cpu::state_tile(p.dh, c.h_batch, c.h_chunk, hv, K, V, p.state_v_first),
                    s.D.data());
  s.Dx.resize(KV);
  for (size_t e = 0; e < KV; ++e) s.Dx[e] = round_to(d.x_dtype, s.D[e]);

  gather(p.q, head_rows(p.q, c.b, c.t0, L, h, K), s.Q);
  gather(p.k, head_rows(p.k, c.b, c.t0, L, h, K), s.Kk);
  gather(p.w, head_rows(p.w, c.b, c.t0, L, hv, K), s.W);
  gather(p.do_, head_rows(p.do_, c.b, c.t0, L, hv, V), s.dO);
  gather(p.dv, head_rows(p.dv, c.b, c.t0, L, hv, V), s.dv2);  // dv, then dv2 in place
  s.g.assign(static_cast<size_t>(L), 0.0f);
  if (d.use_g) gather(p.g, cpu::head_column(p.g, c.b, c.t0, L, hv), s.g);
  const float g_last = s.g[static_cast<size_t>(L - 1)];
  s.gk_last.assign(static_cast<size_t>(K), 0.0f);
  if (d.use_gk) gather(p.gk, head_rows(p.gk, c.b, c.t0 + L - 1, 1, hv, K), s.gk_last);

  // dv2 = dv + 2^(g_last - g) k·Dx, stored in X; the update below reads it as stored.
  for (int64_t r = 0; r < L; ++r) {
    s.kD.assign(static_cast<size_t>(V), 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float a = s.Kk[r * K + k];
      const float* Dx_k = &s.Dx[k * V];
      for (int64_t v = 0; v < V; ++v) s.kD[v] += a * Dx_k[v];
    }
    const float factor = d.use_g ? std::exp2(g_last - s.g[r]) : 1.0f;
    float* dv2_r = &s.dv2[r * V];
    for (int64_t v = 0; v < V; ++v) dv2_r[v] += factor * s.kD[v];
  }
  cpu::scatter_tile(p.dv2, head_rows(p.dv2, c.b, c.t0, L, hv, V), s.dv2.data());
  for (float& x : s.dv2) x = round_to(d.x_dtype, x);

  // update = scale (2^g q)ᵀ do − wᵀ dv2, summed over the chunk's rows; then the decayed D plus it.
  const auto scale = static_cast<float>(d.scale);
  s.update.assign(KV, 0.0f);
  for (int64_t r = 0; r < L; ++r) {
    const float q_gate = d.use_g ? scale * std::exp2(s.g[r]) : scale;
    const float* dO_r = &s.dO[r * V];
    const float* dv2_r = &s.dv2[r * V];
    for (int64_t k = 0; k < K; ++k) {
      const float qa = q_gate * s.Q[r * K + k];
      const float wa = s.W[r * K + k];
      float* u_k = &s.update[k * V];
      for (int64_t v = 0; v < V; ++v) u_k[v] += qa * dO_r[v] - wa * dv2_r[v];
    }
  }
  const float g_decay = d.use_g ? std::exp2(g_last) : 1.0f;
  for (int64_t k = 0; k < K; ++k) {
    const float decay = g_decay * (d.use_gk ? std::exp2(s.gk_last[k]) : 1.0f);
    float* D_k = &s.D[k * V];
    const float* u_k = &s.update[k * V];
    for (int64_t v = 0; v < V; ++v) D_k[v] = decay * D_k[v] + u_k[v];
  }
}

// One (sequence, value head): D from dht (or 0), the sequence's chunks last to first, then dh0.
void scan_sequence(const P& p, const Dims& d, const std::vector<ChunkTask>& tasks,
                   SequenceChunks chunks, int64_t n, int64_t hv, Scratch& s) {
  const int64_t K = d.K, V = d.V;
  s.D.assign(static_cast<size_t>(K * V), 0.0f);
  if (!p.dht.empty_arg()) gather(p.dht, sequence_state(p.dht, n, hv, K, V, p.state_v_first), s.D);
  for (int64_t i = chunks.end - 1; i >= chunks.begin; --i) {
    scan_chunk(p, d, tasks[static_cast<size_t>(i)], hv, s);
  }
  cpu::scatter_tile(p.dh0, sequence_state(p.dh0, n, hv, K, V, p.state_v_first), s.D.data());
}

}  // namespace

Status run_chunk_bwd_dhu_cpu(const P& problem, const Dims& dims) {
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
