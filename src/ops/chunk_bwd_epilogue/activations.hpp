#pragma once
// The activations a KDA layer may run in the kernel (SPEC-chunk-kda.md steps 1-3) and their
// derivatives, in float64: what the layer's references and the epilogue's cpu-ref share.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

namespace kda::detail::activations {

inline double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// log(1 + e^x) without overflow.
inline double softplus(double x) {
  return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)));
}

// One channel's natural-log decay from the gate's raw input x = g + dt_bias, and its
// derivatives by x and by A_log. With lower_bound L: L · sigmoid(exp(A_log) · x) (A_log absent:
// sigmoid(x)); without: −exp(A_log) · softplus(x).
struct Gate {
  double value, d_x, d_A_log;
};

inline Gate gate_of(double x, std::optional<double> lower_bound, bool has_A_log, double A_log) {
  const double s = has_A_log ? std::exp(A_log) : 1.0;
  if (lower_bound) {
    const double L = *lower_bound;
    const double sg = sigmoid(s * x);
    const double d_sx = L * sg * (1.0 - sg);  // d value / d (s x)
    return {L * sg, d_sx * s, has_A_log ? d_sx * x * s : 0.0};
  }
  const double value = -s * softplus(x);
  return {value, -s * sigmoid(x), value};
}

// beta from its raw value: sigmoid (times 2 with allow_neg_eigval) when `from_logits`, and the
// derivative by the raw value.
struct Beta {
  double value, d_raw;
};

inline Beta beta_of(double raw, bool from_logits, bool allow_neg_eigval) {
  if (!from_logits) return {raw, 1.0};
  const double m = allow_neg_eigval ? 2.0 : 1.0, sg = sigmoid(raw);
  return {m * sg, m * sg * (1.0 - sg)};
}

// 1 / ||x|| as fla's l2norm takes it: (Σ x² + 1e-6)^(-1/2) over one row of n values.
inline double inverse_norm(const double* x, int64_t n) {
  double sum = 0.0;
  for (int64_t c = 0; c < n; ++c) sum += x[c] * x[c];
  return 1.0 / std::sqrt(sum + 1e-6);
}

// l2norm's backward for one row: dx = (dx̂ − x̂ (x̂ · dx̂)) / ||x||, in place over d.
inline void l2norm_backward(const double* x_hat, double inv_norm, double* d, int64_t n) {
  double dot = 0.0;
  for (int64_t c = 0; c < n; ++c) dot += x_hat[c] * d[c];
  for (int64_t c = 0; c < n; ++c) d[c] = inv_norm * (d[c] - x_hat[c] * dot);
}

}  // namespace kda::detail::activations
