// cpu-ref of chunk_fwd_h: the forward state scan in float64 with plain loops. For each sequence
// and value head hv (key head hv / (HV / H)), S (K x V) starts at initial_state (or 0) and walks
// the chunks from the first to the last (tokens t0 .. last):
//   h[c]     = S                                       (the state at c's start)
//   v_new[t] = u[t] - w[t]·S                           (t in chunk c)
//   x[t]     = 2^(g[last] - g[t]) v_new[t]             (the factor only with g)
//   S        = 2^(g[last]) 2^(gk[last]) ⊙ S + Σ_t k[t]ᵀ x[t]   (row k scaled by 2^(gk[last, k]))
// and final_state = S after the last chunk. Nothing is rounded on the way.

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/chunk_plan.hpp"
#include "core/element.hpp"
#include "core/parallel_for.hpp"
#include "ops/chunk_fwd_h/backends.hpp"

namespace kda::detail {

namespace {

using P = ChunkFwdHProblem;
using D = ChunkFwdHDims;

void scan_sequence(const P& p, const D& d, const std::vector<ChunkTask>& tasks,
                   SequenceChunks chunks, int64_t n, int64_t hv) {
  const int64_t K = d.K, V = d.V, h = hv / (d.HV / d.H);
  const bool v_first = p.state_v_first;
  std::vector<double> S(static_cast<size_t>(K * V), 0.0);
  auto at = [&](int64_t k, int64_t v) -> double& { return S[static_cast<size_t>(k * V + v)]; };
  if (!p.initial_state.empty_arg()) {
    for (int64_t k = 0; k < K; ++k)
      for (int64_t v = 0; v < V; ++v)
        at(k, v) =
            load_double(p.initial_state, state_offset(p.initial_state, v_first, n, hv, k, v));
  }
  std::vector<double> x(static_cast<size_t>(d.BT * V));
  for (int64_t i = chunks.begin; i < chunks.end; ++i) {
    const ChunkTask& c = tasks[static_cast<size_t>(i)];
    for (int64_t k = 0; k < K; ++k)
      for (int64_t v = 0; v < V; ++v)
        store_float(p.h, state_offset(p.h, v_first, c.h_batch, c.h_chunk, hv, k, v),
                    static_cast<float>(at(k, v)));
    const int64_t last = c.t0 + c.len - 1;
    const double g_last = d.use_g ? load_double(p.g, offset_of(p.g, c.b, last, hv)) : 0.0;
    for (int64_t r = 0; r < c.len; ++r) {
      const int64_t t = c.t0 + r;
      const double factor =
          d.use_g ? std::exp2(g_last - load_double(p.g, offset_of(p.g, c.b, t, hv))) : 1.0;
      for (int64_t v = 0; v < V; ++v) {
        double wS = 0.0;
        for (int64_t k = 0; k < K; ++k)
          wS += load_double(p.w, offset_of(p.w, c.b, t, hv, k)) * at(k, v);
        const double v_new = load_double(p.u, offset_of(p.u, c.b, t, hv, v)) - wS;
        store_float(p.v_new, offset_of(p.v_new, c.b, t, hv, v), static_cast<float>(v_new));
        x[static_cast<size_t>(r * V + v)] = factor * v_new;
      }
    }
    for (int64_t k = 0; k < K; ++k) {
      const double decay =
          std::exp2(g_last) *
          (d.use_gk ? std::exp2(load_double(p.gk, offset_of(p.gk, c.b, last, hv, k))) : 1.0);
      for (int64_t v = 0; v < V; ++v) {
        double update = 0.0;
        for (int64_t r = 0; r < c.len; ++r)
          update += load_double(p.k, offset_of(p.k, c.b, c.t0 + r, h, k)) *
                    x[static_cast<size_t>(r * V + v)];
        at(k, v) = decay * at(k, v) + update;
      }
    }
  }
  for (int64_t k = 0; k < K; ++k)
    for (int64_t v = 0; v < V; ++v)
      store_float(p.final_state, state_offset(p.final_state, v_first, n, hv, k, v),
                  static_cast<float>(at(k, v)));
}

}  // namespace

Status run_chunk_fwd_h_cpu_ref(const P& p, const D& d) {
  const std::vector<ChunkTask> tasks = plan_chunks(p.cu_seqlens, d);
  const std::vector<SequenceChunks> sequences = chunks_by_sequence(tasks, d.num_seqs);
  cpu::parallel_for_units<cpu::NoScratch>(d.num_seqs * d.HV, [&](int64_t unit, cpu::NoScratch&) {
    const int64_t n = unit / d.HV, hv = unit % d.HV;
    scan_sequence(p, d, tasks, sequences[static_cast<size_t>(n)], n, hv);
  });
  return Status::Ok();
}

}  // namespace kda::detail
