#pragma once
// A KDA layer's random activation inputs, written once for the operators that apply the
// activations (chunk_bwd_epilogue's and chunk_bwd_prep's host.cpp): g (per-token natural-log
// decays −U(0.001, 1) log-uniformly, or with the gate in the kernel its raw input N(0, 1)),
// beta (U(0.05, 0.95), or N(0, 1) logits with the sigmoid) and, where present, A_log (U(0, 2)
// or the given values, repeated) and dt_bias (N(0, 0.5)).

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/host_problem.hpp"

namespace kda::io {

// Whether `gate` names a random layer problem's gate form: "none", "softplus" or "lower_bound".
inline bool is_layer_gate_name(const std::string& gate) {
  return gate == "none" || gate == "softplus" || gate == "lower_bound";
}

// Throws std::invalid_argument naming `gate` unless it is a gate form.
inline void check_layer_gate_name(const std::string& gate) {
  if (!is_layer_gate_name(gate)) {
    throw std::invalid_argument("gate: expected none, softplus or lower_bound, got " + gate);
  }
}

// Draws from `rng` through the caller's N(0, 1) and U(0, 1) (their state carries on from the
// caller's other draws), in the order g, beta, A_log, dt_bias. `gate` is "none", "softplus" or
// "lower_bound"; `A_log_values` empty draws A_log.
inline void fill_layer_activations(const std::string& gate, bool beta_sigmoid,
                                   const std::vector<double>& A_log_values, std::mt19937_64& rng,
                                   std::normal_distribution<double>& normal,
                                   std::uniform_real_distribution<double>& uniform,
                                   HostProblem* hp) {
  HostTensor& g = hp->get("g");
  for (int64_t i = 0, n = g.numel(); i < n; ++i) {
    g.set(i, gate == "none" ? -std::exp(std::log(1e-3) * uniform(rng)) : normal(rng));
  }
  HostTensor& beta = hp->get("beta");
  for (int64_t i = 0, n = beta.numel(); i < n; ++i) {
    beta.set(i, beta_sigmoid ? normal(rng) : 0.05 + 0.9 * uniform(rng));
  }
  if (!hp->has("A_log")) return;
  HostTensor& A_log = hp->get("A_log");
  for (int64_t i = 0, n = A_log.numel(); i < n; ++i) {
    const double drawn = 2.0 * uniform(rng);  // drawn either way: the other inputs stay the same
    A_log.set(i, A_log_values.empty() ? drawn
                                      : A_log_values[static_cast<size_t>(i) % A_log_values.size()]);
  }
  HostTensor& dt_bias = hp->get("dt_bias");
  for (int64_t i = 0, n = dt_bias.numel(); i < n; ++i) dt_bias.set(i, 0.5 * normal(rng));
}

}  // namespace kda::io
