// cpu-ref of chunk_bwd_dhu: the reverse state scan in float64 with plain loops. For each
// sequence and value head hv (query/key head hv / (HV / H)), D (K x V) starts at dht (or 0) and
// walks the chunks from the last to the first:
//   dh[c]  = D                                            (the gradient by the state at c's end)
//   dv2[t] = dv[t] + 2^(g[last] - g[t]) k[t]·D            (t in chunk c; the factor only with g)
//   D      = 2^(g[last]) 2^(gk[last]) ⊙ D                 (row k scaled by 2^(gk[last, k]))
//            + scale Σ_t (2^(g[t]) q[t])ᵀ do[t] − Σ_t w[t]ᵀ dv2[t]
// and dh0 = D after the first chunk. dv2 enters the update unrounded.

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/chunk_plan.hpp"
#include "core/element.hpp"
#include "core/parallel_for.hpp"
#include "ops/chunk_bwd_dhu/backends.hpp"

namespace kda::detail {

namespace {

using P = ChunkBwdDhuProblem;
using D = ChunkBwdDhuDims;

void scan_sequence(const P& p, const D& d, const std::vector<ChunkTask>& tasks,
                   SequenceChunks chunks, int64_t n, int64_t hv) {
  const int64_t K = d.K, V = d.V, h = hv / (d.HV / d.H);
  const bool v_first = p.state_v_first;
  std::vector<double> S(static_cast<size_t>(K * V), 0.0);
  auto at = [&](int64_t k, int64_t v) -> double& { return S[static_cast<size_t>(k * V + v)]; };
  if (!p.dht.empty_arg()) {
    for (int64_t k = 0; k < K; ++k)
      for (int64_t v = 0; v < V; ++v)
        at(k, v) = load_double(p.dht, state_offset(p.dht, v_first, n, hv, k, v));
  }
  std::vector<double> dv2(static_cast<size_t>(d.BT * V));
  for (int64_t i = chunks.end - 1; i >= chunks.begin; --i) {
    const ChunkTask& c = tasks[static_cast<size_t>(i)];
    for (int64_t k = 0; k < K; ++k)
      for (int64_t v = 0; v < V; ++v)
        store_float(p.dh, state_offset(p.dh, v_first, c.h_batch, c.h_chunk, hv, k, v),
                    static_cast<float>(at(k, v)));
    const int64_t last = c.t0 + c.len - 1;
    const double g_last = d.use_g ? load_double(p.g, offset_of(p.g, c.b, last, hv)) : 0.0;
    for (int64_t r = 0; r < c.len; ++r) {
      const int64_t t = c.t0 + r;
      const double factor =
          d.use_g ? std::exp2(g_last - load_double(p.g, offset_of(p.g, c.b, t, hv))) : 1.0;
      for (int64_t v = 0; v < V; ++v) {
        double x = 0.0;
        for (int64_t k = 0; k < K; ++k)
          x += load_double(p.k, offset_of(p.k, c.b, t, h, k)) * at(k, v);
        const double total = load_double(p.dv, offset_of(p.dv, c.b, t, hv, v)) + factor * x;
        dv2[static_cast<size_t>(r * V + v)] = total;
        store_float(p.dv2, offset_of(p.dv2, c.b, t, hv, v), static_cast<float>(total));
      }
    }
    for (int64_t k = 0; k < K; ++k) {
      const double decay =
          std::exp2(g_last) *
          (d.use_gk ? std::exp2(load_double(p.gk, offset_of(p.gk, c.b, last, hv, k))) : 1.0);
      for (int64_t v = 0; v < V; ++v) {
        double update = 0.0;
        for (int64_t r = 0; r < c.len; ++r) {
          const int64_t t = c.t0 + r;
          const double q_gated =
              load_double(p.q, offset_of(p.q, c.b, t, h, k)) *
              (d.use_g ? std::exp2(load_double(p.g, offset_of(p.g, c.b, t, hv))) : 1.0);
          update +=
              d.scale * q_gated * load_double(p.do_, offset_of(p.do_, c.b, t, hv, v)) -
              load_double(p.w, offset_of(p.w, c.b, t, hv, k)) * dv2[static_cast<size_t>(r * V + v)];
        }
        at(k, v) = decay * at(k, v) + update;
      }
    }
  }
  for (int64_t k = 0; k < K; ++k)
    for (int64_t v = 0; v < V; ++v)
      store_float(p.dh0, state_offset(p.dh0, v_first, n, hv, k, v), static_cast<float>(at(k, v)));
}

}  // namespace

Status run_chunk_bwd_dhu_cpu_ref(const P& p, const D& d) {
  const std::vector<ChunkTask> tasks = plan_chunks(p.cu_seqlens, d);
  const std::vector<SequenceChunks> sequences = chunks_by_sequence(tasks, d.num_seqs);
  cpu::parallel_for_units<cpu::NoScratch>(d.num_seqs * d.HV, [&](int64_t unit, cpu::NoScratch&) {
    const int64_t n = unit / d.HV, hv = unit % d.HV;
    scan_sequence(p, d, tasks, sequences[static_cast<size_t>(n)], n, hv);
  });
  return Status::Ok();
}

}  // namespace kda::detail
