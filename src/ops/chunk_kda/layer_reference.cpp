// The whole KDA layer in float64 (layer_reference.hpp): for every sequence and value head, the
// activations of its tokens, the recurrence forward with every state kept, then the recurrence
// backward token by token in reverse, then the activations' backward.

#include "ops/chunk_kda/layer_reference.hpp"

#include "ops/chunk_bwd_epilogue/activations.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace kda::layer {

namespace {

using detail::activations::Gate;

// One sequence: batch row `b`, tokens [t0, t0 + len), state slot `n`.
struct Sequence {
  int64_t b, t0, len, n;
};

std::vector<Sequence> sequences_of(const LayerShape& s) {
  std::vector<Sequence> out;
  if (s.cu_seqlens.empty()) {
    for (int64_t b = 0; b < s.B; ++b) out.push_back({b, 0, s.T, b});
    return out;
  }
  for (size_t n = 0; n + 1 < s.cu_seqlens.size(); ++n) {
    const int64_t t0 = s.cu_seqlens[n], t1 = s.cu_seqlens[n + 1];
    out.push_back({0, t0, t1 - t0, static_cast<int64_t>(n)});
  }
  return out;
}

}  // namespace

HeadSequenceGradients token_recurrence(const HeadSequence& s, double scale) {
  const int64_t K = s.K, V = s.V;
  const size_t KV = static_cast<size_t>(K * V);
  HeadSequenceGradients r(s);

  // Forward: states[t] is the state before token t (states[len]: the final one).
  std::vector<double> states(static_cast<size_t>(s.len + 1) * KV, 0.0);
  std::copy(s.S0.begin(), s.S0.end(), states.begin());
  std::vector<double> decayed(KV), e(static_cast<size_t>(V));
  // decayed = diag(exp(gate_t)) · S;  e = v_t − decayedᵀ k_t
  const auto decay_and_error = [&](int64_t t, const double* S) {
    const double* kt = &s.k[t * K];
    for (int64_t i = 0; i < K; ++i) {
      const double a = std::exp(s.gate[t * K + i]);
      for (int64_t j = 0; j < V; ++j) decayed[i * V + j] = a * S[i * V + j];
    }
    for (int64_t j = 0; j < V; ++j) {
      double pred = 0.0;
      for (int64_t i = 0; i < K; ++i) pred += decayed[i * V + j] * kt[i];
      e[j] = s.v[t * V + j] - pred;
    }
  };
  for (int64_t t = 0; t < s.len; ++t) {
    const double* kt = &s.k[t * K];
    const double* qt = &s.q[t * K];
    double* next = &states[(t + 1) * KV];
    decay_and_error(t, &states[t * KV]);
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j)
        next[i * V + j] = decayed[i * V + j] + s.beta[t] * kt[i] * e[j];
    for (int64_t j = 0; j < V; ++j) {
      double sum = 0.0;
      for (int64_t i = 0; i < K; ++i) sum += next[i * V + j] * qt[i];
      r.o[t * V + j] = scale * sum;
    }
  }
  r.S_T.assign(states.begin() + s.len * KV, states.end());

  // Backward. dS is the gradient by the state after token t.
  std::vector<double> dS = s.dS_T, d_decayed(KV), de(static_cast<size_t>(V));
  for (int64_t t = s.len - 1; t >= 0; --t) {
    const double* S = &states[t * KV];
    const double* after = &states[(t + 1) * KV];
    const double* kt = &s.k[t * K];
    const double* qt = &s.q[t * K];
    const double* dot = &s.do_[t * V];
    // o_t = scale · afterᵀ q_t
    for (int64_t i = 0; i < K; ++i) {
      double sum = 0.0;
      for (int64_t j = 0; j < V; ++j) {
        sum += after[i * V + j] * dot[j];
        dS[i * V + j] += scale * qt[i] * dot[j];
      }
      r.dq[t * K + i] = scale * sum;
    }
    // after = decayed + beta · k eᵀ
    decay_and_error(t, S);
    double d_beta = 0.0;
    for (int64_t j = 0; j < V; ++j) {
      double sum = 0.0;
      for (int64_t i = 0; i < K; ++i) sum += dS[i * V + j] * kt[i];
      d_beta += sum * e[j];
      de[j] = s.beta[t] * sum;
      r.dv[t * V + j] = de[j];
    }
    r.dbeta[t] = d_beta;
    for (int64_t i = 0; i < K; ++i) {
      double via_e = 0.0, via_update = 0.0;
      for (int64_t j = 0; j < V; ++j) {
        via_update += dS[i * V + j] * e[j];
        via_e += decayed[i * V + j] * de[j];
        d_decayed[i * V + j] = dS[i * V + j] - kt[i] * de[j];
      }
      r.dk[t * K + i] = s.beta[t] * via_update - via_e;
    }
    // decayed = diag(exp(gate)) · S
    for (int64_t i = 0; i < K; ++i) {
      const double a = std::exp(s.gate[t * K + i]);
      double d_a = 0.0;
      for (int64_t j = 0; j < V; ++j) {
        d_a += d_decayed[i * V + j] * S[i * V + j];
        dS[i * V + j] = a * d_decayed[i * V + j];
      }
      r.dgate[t * K + i] = d_a * a;
    }
  }
  r.dS0 = std::move(dS);
  return r;
}

LayerOutputs layer_reference(const LayerShape& sh, const LayerInputs& in, const LayerOptions& o,
                             int64_t chunk_size) {
  const int64_t T = sh.T, H = sh.H, HV = sh.HV, K = sh.K, V = sh.V;
  if (H < 1 || HV % H != 0) throw std::invalid_argument("layer_reference: HV % H != 0");
  const int64_t G = HV / H;  // value heads per query/key head
  const int64_t N = sh.num_seqs();
  const double scale = o.scale ? *o.scale : 1.0 / std::sqrt(static_cast<double>(K));
  const bool has_h0 = !in.initial_state.empty(), has_dht = !in.dht.empty();
  const bool has_A_log = !in.A_log.empty(), has_dt_bias = !in.dt_bias.empty();
  if (o.gate_in_kernel && !has_A_log && !o.lower_bound) {
    throw std::invalid_argument(
        "layer_reference: the gate in the kernel needs A_log or lower_bound");
  }

  const auto qk_at = [&](int64_t b, int64_t t, int64_t h) { return ((b * T + t) * H + h) * K; };
  const auto gk_at = [&](int64_t b, int64_t t, int64_t hv) { return ((b * T + t) * HV + hv) * K; };
  const auto v_at = [&](int64_t b, int64_t t, int64_t hv) { return ((b * T + t) * HV + hv) * V; };
  const auto beta_at = [&](int64_t b, int64_t t, int64_t hv) { return (b * T + t) * HV + hv; };
  // State element (i over K, j over V) of slot n, head hv, in the caller's layout.
  const auto state_at = [&](int64_t n, int64_t hv, int64_t i, int64_t j) {
    return o.state_v_first ? ((n * HV + hv) * V + j) * K + i : ((n * HV + hv) * K + i) * V + j;
  };

  LayerOutputs out;
  out.o.assign(in.v.size(), 0.0);
  out.final_state.assign(static_cast<size_t>(N * HV * K * V), 0.0);
  out.dv.assign(in.v.size(), 0.0);
  out.dg.assign(in.g.size(), 0.0);
  out.dbeta.assign(in.beta.size(), 0.0);
  if (o.gate_in_kernel && has_A_log) out.dA_log.assign(static_cast<size_t>(HV), 0.0);
  if (o.gate_in_kernel && has_dt_bias) out.ddt_bias.assign(static_cast<size_t>(HV * K), 0.0);
  if (has_h0) out.dinitial_state.assign(in.initial_state.size(), 0.0);
  // Gradients by the normalised q, k, summed over the value heads that share them.
  std::vector<double> dq_hat(in.q.size(), 0.0), dk_hat(in.k.size(), 0.0);

  // Step 1: q, k after l2norm, by token (1 / norm kept for the backward).
  const auto normalised = [&](const std::vector<double>& x, std::vector<double>* inv_norm) {
    std::vector<double> y = x;
    inv_norm->assign(x.size() / static_cast<size_t>(K), 1.0);
    if (!o.qk_l2norm) return y;
    for (size_t r = 0; r < inv_norm->size(); ++r) {
      (*inv_norm)[r] = detail::activations::inverse_norm(&x[r * K], K);
      for (int64_t c = 0; c < K; ++c) y[r * K + c] = x[r * K + c] * (*inv_norm)[r];
    }
    return y;
  };
  std::vector<double> q_inv, k_inv;
  const std::vector<double> q_hat = normalised(in.q, &q_inv);
  const std::vector<double> k_hat = normalised(in.k, &k_inv);

  // The chunked evaluation's stage tensors, with each sequence's first chunk in h's chunk order.
  const std::vector<Sequence> seqs = sequences_of(sh);
  std::vector<int64_t> first_chunk;
  if (chunk_size > 0) {
    const auto chunks_of = [&](int64_t len) { return (len + chunk_size - 1) / chunk_size; };
    int64_t total = 0;
    for (const Sequence& seq : seqs) {
      first_chunk.push_back(sh.cu_seqlens.empty() ? seq.b * chunks_of(T) : total);
      total += chunks_of(seq.len);
    }
    out.Akk.assign(static_cast<size_t>(sh.B * T * HV * chunk_size), 0.0);
    out.Aqk.assign(out.Akk.size(), 0.0);
    out.v_new.assign(in.v.size(), 0.0);
    out.dv_scan.assign(in.v.size(), 0.0);
    out.h.assign(static_cast<size_t>(total * HV * K * V), 0.0);
    out.dh.assign(out.h.size(), 0.0);
  }
  for (size_t sq = 0; sq < seqs.size(); ++sq) {
    const Sequence& seq = seqs[sq];
    for (int64_t hv = 0; hv < HV; ++hv) {
      const int64_t h = hv / G;
      HeadSequence hs;
      hs.len = seq.len;
      hs.K = K;
      hs.V = V;
      hs.q.resize(static_cast<size_t>(seq.len * K));
      hs.k.resize(hs.q.size());
      hs.gate.resize(hs.q.size());
      hs.v.resize(static_cast<size_t>(seq.len * V));
      hs.do_.resize(hs.v.size());
      hs.beta.resize(static_cast<size_t>(seq.len));
      hs.S0.assign(static_cast<size_t>(K * V), 0.0);
      hs.dS_T.assign(hs.S0.size(), 0.0);
      // Steps 2 and 3 for every token of the sequence, with their derivatives.
      std::vector<Gate> gate(static_cast<size_t>(seq.len * K));
      std::vector<double> d_beta_raw(hs.beta.size(), 1.0);
      for (int64_t t = 0; t < seq.len; ++t) {
        const int64_t tt = seq.t0 + t;
        for (int64_t c = 0; c < K; ++c) {
          hs.q[t * K + c] = q_hat[qk_at(seq.b, tt, h) + c];
          hs.k[t * K + c] = k_hat[qk_at(seq.b, tt, h) + c];
          const double g = in.g[gk_at(seq.b, tt, hv) + c];
          Gate& gt = gate[static_cast<size_t>(t * K + c)];
          if (o.gate_in_kernel) {
            const double x = g + (has_dt_bias ? in.dt_bias[hv * K + c] : 0.0);
            gt = detail::activations::gate_of(x, o.lower_bound, has_A_log,
                                              has_A_log ? in.A_log[hv] : 0.0);
          } else {
            gt = {g, 1.0, 0.0};
          }
          hs.gate[t * K + c] = gt.value;
        }
        for (int64_t j = 0; j < V; ++j) {
          hs.v[t * V + j] = in.v[v_at(seq.b, tt, hv) + j];
          hs.do_[t * V + j] = in.do_[v_at(seq.b, tt, hv) + j];
        }
        const double raw = in.beta[beta_at(seq.b, tt, hv)];
        const detail::activations::Beta beta =
            detail::activations::beta_of(raw, o.beta_sigmoid, o.allow_neg_eigval);
        hs.beta[t] = beta.value;
        d_beta_raw[t] = beta.d_raw;
      }
      for (int64_t i = 0; i < K; ++i) {
        for (int64_t j = 0; j < V; ++j) {
          if (has_h0) hs.S0[i * V + j] = in.initial_state[state_at(seq.n, hv, i, j)];
          if (has_dht) hs.dS_T[i * V + j] = in.dht[state_at(seq.n, hv, i, j)];
        }
      }

      // Step 4 and its backward.
      const HeadSequenceGradients r =
          chunk_size > 0 ? chunked_recurrence(hs, scale, chunk_size) : token_recurrence(hs, scale);

      if (chunk_size > 0) {
        const int64_t KV = K * V;
        for (size_t n = 0; n < r.S.size() / static_cast<size_t>(KV); ++n) {
          const int64_t at = ((first_chunk[sq] + static_cast<int64_t>(n)) * HV + hv) * KV;
          std::copy_n(r.S.begin() + static_cast<ptrdiff_t>(n) * KV, KV, out.h.begin() + at);
          std::copy_n(r.dS.begin() + static_cast<ptrdiff_t>(n) * KV, KV, out.dh.begin() + at);
        }
        for (int64_t t = 0; t < seq.len; ++t) {
          const int64_t tt = seq.t0 + t;
          const int64_t row = ((seq.b * T + tt) * HV + hv) * chunk_size;
          std::copy_n(r.Akk.begin() + t * chunk_size, chunk_size, out.Akk.begin() + row);
          std::copy_n(r.Aqk.begin() + t * chunk_size, chunk_size, out.Aqk.begin() + row);
          std::copy_n(r.v_new.begin() + t * V, V, out.v_new.begin() + v_at(seq.b, tt, hv));
          std::copy_n(r.dv_scan.begin() + t * V, V, out.dv_scan.begin() + v_at(seq.b, tt, hv));
        }
      }

      // Back through steps 2 and 3; the outputs in the caller's layout.
      for (int64_t t = 0; t < seq.len; ++t) {
        const int64_t tt = seq.t0 + t;
        for (int64_t j = 0; j < V; ++j) {
          out.o[v_at(seq.b, tt, hv) + j] = r.o[t * V + j];
          out.dv[v_at(seq.b, tt, hv) + j] = r.dv[t * V + j];
        }
        for (int64_t c = 0; c < K; ++c) {
          dq_hat[qk_at(seq.b, tt, h) + c] += r.dq[t * K + c];
          dk_hat[qk_at(seq.b, tt, h) + c] += r.dk[t * K + c];
          const Gate& gt = gate[static_cast<size_t>(t * K + c)];
          const double d_gate = r.dgate[t * K + c];
          out.dg[gk_at(seq.b, tt, hv) + c] = d_gate * gt.d_x;
          if (!out.ddt_bias.empty()) out.ddt_bias[hv * K + c] += d_gate * gt.d_x;
          if (!out.dA_log.empty()) out.dA_log[hv] += d_gate * gt.d_A_log;
        }
        out.dbeta[beta_at(seq.b, tt, hv)] = r.dbeta[t] * d_beta_raw[t];
      }
      for (int64_t i = 0; i < K; ++i) {
        for (int64_t j = 0; j < V; ++j) {
          out.final_state[state_at(seq.n, hv, i, j)] = r.S_T[i * V + j];
          if (has_h0) out.dinitial_state[state_at(seq.n, hv, i, j)] = r.dS0[i * V + j];
        }
      }
    }
  }

  // Step 1's backward: d x = (d x̂ − x̂ (x̂ · d x̂)) / norm for each token of q and k.
  const auto through_l2norm = [&](const std::vector<double>& x_hat, const std::vector<double>& inv,
                                  std::vector<double> d_hat) {
    if (!o.qk_l2norm) return d_hat;
    for (size_t r = 0; r < inv.size(); ++r) {
      detail::activations::l2norm_backward(&x_hat[r * K], inv[r], &d_hat[r * K], K);
    }
    return d_hat;
  };
  out.dq = through_l2norm(q_hat, q_inv, std::move(dq_hat));
  out.dk = through_l2norm(k_hat, k_inv, std::move(dk_hat));
  return out;
}

}  // namespace kda::layer
