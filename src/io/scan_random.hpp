#pragma once
// The state scans' random gates, written once for chunk_bwd_dhu's and chunk_fwd_h's problems
// (their host.cpp): g [B, T, HV] and gk [B, T, HV, K], each where present, the cumsum over each
// chunk's rows (restarting at every chunk, varlen-aware) of per-token log2 decays ln(a) / ln 2
// with ln(a) drawn log-uniformly from [-1, -0.001].

#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "core/chunk_plan.hpp"
#include "io/host_problem.hpp"

namespace kda::io {

// Draws from `rng` through `uniform` (U(0, 1)), g first, then gk, per chunk, value head, channel
// and token in that order. B, T from the [B, T, ...] tensor `anchor`, HV from w.
inline void fill_scan_gates(const char* anchor, int64_t BT, std::mt19937_64& rng,
                            std::uniform_real_distribution<double>& uniform, HostProblem* hp) {
  const HostTensor& a = hp->get(anchor);
  const int64_t B = a.shape[0], T = a.shape[1], K = a.shape[3];
  const int64_t HV = hp->get("w").shape[2];
  const TensorView cu = hp->has("cu_seqlens") ? hp->get("cu_seqlens").view() : TensorView{};
  const int64_t NT = T == 0 ? 0 : (T + BT - 1) / BT;
  const std::vector<ChunkTask> chunks = plan_chunks(cu, B, T, BT, NT);
  constexpr double kLn2 = 0.6931471805599453;
  for (const auto& [name, channels] : {std::pair{"g", int64_t{1}}, {"gk", K}}) {
    if (!hp->has(name)) continue;
    HostTensor& gate = hp->get(name);
    for (const ChunkTask& ch : chunks) {
      for (int64_t hv = 0; hv < HV; ++hv) {
        for (int64_t j = 0; j < channels; ++j) {
          double sum = 0.0;
          for (int64_t t = ch.t0; t < ch.t0 + ch.len; ++t) {
            sum += -std::exp(std::log(1e-3) * uniform(rng)) / kLn2;
            gate.set(((ch.b * T + t) * HV + hv) * channels + j, sum);
          }
        }
      }
    }
  }
}

}  // namespace kda::io
