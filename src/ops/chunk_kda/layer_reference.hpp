#pragma once
// A whole KDA layer, forward and backward, in float64 with plain loops: SPEC-chunk-kda.md's math
// (l2norm, the gate and beta activations, the token recurrence, and the gradients of
// Σ o·do + Σ final_state·dht back through all of them). The judge of the layer's kernels, and
// what checks the golden files of ../shared/golden-kda on any machine. Not yet an operator of
// KDA_OPS: the fused backward's operator takes it as its cpu-ref.

#include <cstdint>
#include <optional>
#include <vector>

namespace kda::layer {

// The call's options (fla's chunk_kda keywords).
struct LayerOptions {
  std::optional<double> scale;    // none: K ** -0.5
  bool qk_l2norm = false;         // use_qk_l2norm_in_kernel
  bool gate_in_kernel = false;    // use_gate_in_kernel: g is the gate's raw input
  bool beta_sigmoid = false;      // use_beta_sigmoid_in_kernel: beta is raw logits
  bool allow_neg_eigval = false;  // with beta_sigmoid: beta = 2 sigmoid(logits)
  bool state_v_first = false;     // initial_state, dht, final_state, d initial_state: [.., V, K]
  std::optional<double> lower_bound;  // the gate's bounded form L·sigmoid(exp(A_log)·x)
};

// Sizes; cu_seqlens (N+1 entries, B = 1) when varlen, else B sequences of T tokens.
struct LayerShape {
  int64_t B = 0, T = 0, H = 0, HV = 0, K = 0, V = 0;
  std::vector<int64_t> cu_seqlens;
  int64_t num_seqs() const {
    return cu_seqlens.empty() ? B : static_cast<int64_t>(cu_seqlens.size()) - 1;
  }
};

// Row-major float64 arrays, SPEC-chunk-kda.md's shapes; an empty optional array is absent.
struct LayerInputs {
  std::vector<double> q, k;           // [B, T, H, K]
  std::vector<double> v;              // [B, T, HV, V]
  std::vector<double> g;              // [B, T, HV, K]: natural-log decay, or the gate's raw input
  std::vector<double> beta;           // [B, T, HV]
  std::vector<double> A_log;          // [HV]
  std::vector<double> dt_bias;        // [HV * K]
  std::vector<double> initial_state;  // [N, HV, K, V] ([N, HV, V, K] with state_v_first)
  std::vector<double> do_;            // [B, T, HV, V]
  std::vector<double> dht;            // like initial_state: the final state's gradient
};

// The forward's outputs and the gradients of every floating input (of the raw inputs where the
// activations are in the kernel). dA_log, ddt_bias, dinitial_state are empty where their input
// is absent.
struct LayerOutputs {
  std::vector<double> o;            // [B, T, HV, V]
  std::vector<double> final_state;  // like initial_state, [N, HV, ...]
  std::vector<double> dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dinitial_state;
  // The chunked evaluation's stage tensors, what the backward's last pass (chunk_bwd_epilogue)
  // reads (empty for the token recurrence): Akk [B, T, HV, BT] (columns past a short chunk 0);
  // h, dh [B, NT, HV, K, V] (K-first; B = 1 and NT the chunks of all sequences when varlen):
  // the state at each chunk's start and the gradient by the state at its end; v_new and the
  // reverse scan's dv [B, T, HV, V]; Aqk [B, T, HV, BT] (scale included), what the backward's
  // first pass (chunk_bwd_prep) reads beside Akk.
  std::vector<double> Akk, Aqk, h, dh, v_new, dv_scan;
};

// One (sequence, value head) of the recurrence (step 4 and its backward), on the activated
// values: what both ways of evaluating it, token by token or chunk by chunk, take and give.
// Row-major; states K x V (K-first, whatever the caller's layout).
struct HeadSequence {
  int64_t len = 0, K = 0, V = 0;
  std::vector<double> q, k;      // [len, K] after l2norm
  std::vector<double> v, do_;    // [len, V]
  std::vector<double> gate;      // [len, K] natural-log decay of each token
  std::vector<double> beta;      // [len] after its sigmoid
  std::vector<double> S0, dS_T;  // [K, V] the initial state and the final state's gradient
};

struct HeadSequenceGradients {
  // Every per-token array sized for `s` and zeroed (the states are left to the evaluation).
  explicit HeadSequenceGradients(const HeadSequence& s)
      : o(static_cast<size_t>(s.len * s.V), 0.0),
        dq(static_cast<size_t>(s.len * s.K), 0.0),
        dk(dq.size(), 0.0),
        dv(o.size(), 0.0),
        dgate(dq.size(), 0.0),
        dbeta(static_cast<size_t>(s.len), 0.0) {}

  std::vector<double> o;       // [len, V]
  std::vector<double> S_T;     // [K, V] the final state
  std::vector<double> dq, dk;  // [len, K] by the normalised q, k
  std::vector<double> dv;      // [len, V]
  std::vector<double> dgate;   // [len, K] by each token's natural-log decay
  std::vector<double> dbeta;   // [len] by the activated beta
  std::vector<double> dS0;     // [K, V]
  // Chunked only: per chunk of the sequence, its Akk and Aqk rows [len, BT], its states S, dS
  // [K, V] (start; gradient by the end), and v_new, the reverse scan's dv [len, V].
  std::vector<double> Akk, Aqk, S, dS, v_new, dv_scan;
};

// Token by token: the recurrence as SPEC-chunk-kda.md writes it.
HeadSequenceGradients token_recurrence(const HeadSequence& s, double scale);

// Chunk by chunk, as fla's chunked backward stages it (chunk_reference.cpp): the same numbers
// in float64, reached through Akk, Aqk, the state scans, dAv and the two backward operators'
// SPEC steps.
HeadSequenceGradients chunked_recurrence(const HeadSequence& s, double scale, int64_t chunk_size);

// chunk_size 0: token_recurrence; 16, 32 or 64: chunked_recurrence.
LayerOutputs layer_reference(const LayerShape& shape, const LayerInputs& in,
                             const LayerOptions& options, int64_t chunk_size = 0);

}  // namespace kda::layer
