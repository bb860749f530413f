#pragma once
// chunk_bwd_epilogue's problem for a golden-kda file, shared by its CPU and GPU tests: the layer's
// raw inputs from the file, the stage tensors (Akk, h, dh, v_new, the reverse scan's dv) from the
// layer's chunked float64 reference; and how its outputs are compared.

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/host_problem.hpp"
#include "kda/kda.hpp"
#include "layer_golden.hpp"

namespace kda::testing::epilogue {

using io::HostProblem;
using io::HostTensor;
using ::kda::layer::LayerOutputs;
using layer::GoldenCase;
using layer::values;

inline HostTensor tensor_of(const std::vector<double>& values, DType dtype,
                            std::vector<int64_t> shape) {
  HostTensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, values[static_cast<size_t>(i)]);
  return t;
}

// The file's input `name` as stored (its dtype), or converted to `dtype` when given.
inline HostTensor input_of(const GoldenCase& c, const std::string& name,
                           std::optional<DType> dtype) {
  const HostTensor& stored = c.file.tensors.at(name);
  if (!dtype) return stored;
  return tensor_of(values(c.file, name), *dtype, stored.shape);
}

// [.., K, V] states as [.., V, K].
inline std::vector<double> transposed_states(const std::vector<double>& s, int64_t K, int64_t V) {
  std::vector<double> t(s.size());
  for (size_t base = 0; base < s.size(); base += static_cast<size_t>(K * V)) {
    for (int64_t k = 0; k < K; ++k)
      for (int64_t v = 0; v < V; ++v) t[base + v * K + k] = s[base + k * V + v];
  }
  return t;
}

// The epilogue's problem for a golden file: the layer's raw inputs from the file (in `x`, or as
// stored), the stage tensors from the chunked reference (`stages`), in X (float32 for `x` f32).
inline HostProblem epilogue_problem(const GoldenCase& c, const LayerOutputs& stages,
                                    std::optional<DType> x, bool state_v_first) {
  const auto& sh = c.shape;
  const int64_t BT = c.chunk_size, NT_rows = sh.cu_seqlens.empty() ? sh.B : 1;
  HostProblem hp;
  hp.op = ChunkBwdEpilogueProblem::kName;
  for (const char* name : {"q", "k", "v", "g", "beta", "do"}) {
    hp.tensors[name] = input_of(c, name, x);
  }
  const DType X = hp.tensors["q"].dtype;
  const int64_t NT = static_cast<int64_t>(stages.h.size()) / (NT_rows * sh.HV * sh.K * sh.V);
  hp.tensors["A"] = tensor_of(stages.Akk, X, {sh.B, sh.T, sh.HV, BT});
  const std::vector<int64_t> state = state_v_first
                                         ? std::vector<int64_t>{NT_rows, NT, sh.HV, sh.V, sh.K}
                                         : std::vector<int64_t>{NT_rows, NT, sh.HV, sh.K, sh.V};
  hp.tensors["h"] = tensor_of(state_v_first ? transposed_states(stages.h, sh.K, sh.V) : stages.h,
                              DType::f32, state);
  hp.tensors["dh"] = tensor_of(state_v_first ? transposed_states(stages.dh, sh.K, sh.V) : stages.dh,
                               DType::f32, state);
  hp.tensors["v_new"] = tensor_of(stages.v_new, X, {sh.B, sh.T, sh.HV, sh.V});
  hp.tensors["dv"] = tensor_of(stages.dv_scan, X, {sh.B, sh.T, sh.HV, sh.V});
  if (c.options.gate_in_kernel) {
    for (const char* name : {"A_log", "dt_bias"}) {
      if (c.file.tensors.count(name)) hp.tensors[name] = c.file.tensors.at(name);
    }
  }
  if (!sh.cu_seqlens.empty()) hp.tensors["cu_seqlens"] = c.file.tensors.at("cu_seqlens");
  hp.options = {{"chunk_size", BT},
                {"state_v_first", state_v_first},
                {"use_qk_l2norm_in_kernel", c.options.qk_l2norm},
                {"use_gate_in_kernel", c.options.gate_in_kernel},
                {"use_beta_sigmoid_in_kernel", c.options.beta_sigmoid},
                {"allow_neg_eigval", c.options.allow_neg_eigval},
                {"scale", c.options.scale},
                {"lower_bound", c.options.gate_in_kernel ? c.options.lower_bound : std::nullopt}};
  hp.allocate_outputs();
  return hp;
}

inline Status run(HostProblem& hp, Backend backend) {
  return kda::run(hp.as<ChunkBwdEpilogueProblem>(), backend);
}

// dA_log and ddt_bias sum a token's gate gradient times its derivative over all tokens, with
// heavy cancellation (their sums are hundreds of times smaller than the sums of magnitudes): a
// float32 backend's rounding of each token's dg, ~1e-7, reaches them amplified. Their bar (the
// per-token bar where it is looser).
constexpr double kReductionBar = 2e-4;

inline bool is_reduction(const std::string& name) {
  return name == "out.dA_log" || name == "out.ddt_bias";
}

// An output's bar against the float64 reference: the operator's own per-token pass bar (its
// OpIo, SPEC-chunk-kda.md's per dtype), and for the reductions at least kReductionBar.
inline double bar_of(DType x, const std::string& name) {
  const double bar = io::find_op(ChunkBwdEpilogueProblem::kName)->pass_bar(x);
  return is_reduction(name) ? std::max(bar, kReductionBar) : bar;
}

inline std::vector<double> all_values(const HostTensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = t.at(static_cast<int64_t>(i));
  return out;
}

// The oracle's name of each output (the same names; a map so that absent ones are explicit).
inline const std::vector<std::string>& golden_outputs() {
  static const std::vector<std::string> names = {"out.dq",    "out.dk",     "out.dv",      "out.dg",
                                                 "out.dbeta", "out.dA_log", "out.ddt_bias"};
  return names;
}

}  // namespace kda::testing::epilogue
