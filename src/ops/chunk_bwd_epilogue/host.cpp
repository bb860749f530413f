// chunk_bwd_epilogue's part of the host-side tooling (io/host_problem.hpp): its outputs, options,
// file checks, bars and random problems. Compiled into kda_io, not libkda.

#include <cmath>
#include <random>

#include "io/host_problem.hpp"
#include "io/layer_random.hpp"
#include "io/metadata.hpp"
#include "io/op_io_support.hpp"

namespace kda::io {

namespace {

using P = ChunkBwdEpilogueProblem;

HostProblem allocate_problem(const EpilogueConfig& c) {
  check_layer_gate_name(c.gate);
  HostProblem hp;
  hp.op = P::kName;
  const bool gate_in_kernel = c.gate != "none";
  hp.options = {{"chunk_size", c.BT},
                {"state_v_first", c.state_v_first},
                {"use_qk_l2norm_in_kernel", c.l2norm},
                {"use_gate_in_kernel", gate_in_kernel},
                {"use_beta_sigmoid_in_kernel", c.beta_sigmoid},
                {"allow_neg_eigval", c.allow_neg_eigval}};
  if (c.scale) hp.options["scale"] = std::optional<double>(*c.scale);
  if (c.gate == "lower_bound") hp.options["lower_bound"] = std::optional<double>(-5.0);
  int64_t B = c.B, T = c.T, NT = c.T == 0 ? 0 : (c.T + c.BT - 1) / c.BT;
  if (!c.seqlens.empty()) {
    B = 1;
    std::tie(T, NT) =
        add_varlen_index_tensors(c.seqlens, c.BT, DType::i64, c.pass_chunk_indices, &hp);
  }
  const int64_t HV = c.HV == 0 ? c.H : c.HV;
  for (const char* name : {"q", "k"}) hp.tensors[name] = HostTensor(c.x_dtype, {B, T, c.H, c.K});
  for (const char* name : {"v", "v_new", "dv", "do"})
    hp.tensors[name] = HostTensor(c.x_dtype, {B, T, HV, c.V});
  hp.tensors["g"] = HostTensor(DType::f32, {B, T, HV, c.K});
  hp.tensors["beta"] = HostTensor(c.beta_dtype, {B, T, HV});
  hp.tensors["A"] = HostTensor(c.x_dtype, {B, T, HV, c.BT});
  const std::vector<int64_t> state = c.state_v_first ? std::vector<int64_t>{B, NT, HV, c.V, c.K}
                                                     : std::vector<int64_t>{B, NT, HV, c.K, c.V};
  for (const char* name : {"h", "dh"}) hp.tensors[name] = HostTensor(c.h_dtype, state);
  if (gate_in_kernel) {
    hp.tensors["A_log"] = HostTensor(DType::f32, {HV});
    hp.tensors["dt_bias"] = HostTensor(DType::f32, {HV * c.K});
  }
  hp.allocate_outputs();
  return hp;
}

void fill_random(const EpilogueConfig& c, HostProblem* hp) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (const char* name : {"q", "k", "v", "v_new", "dv", "do", "h", "dh"}) {
    HostTensor& t = hp->get(name);
    for (int64_t i = 0, n = t.numel(); i < n; ++i) t.set(i, normal(rng));
  }
  HostTensor& A = hp->get("A");
  for (int64_t i = 0, n = A.numel(); i < n; ++i) A.set(i, 0.1 * normal(rng));
  fill_layer_activations(c.gate, c.beta_sigmoid, c.A_log, rng, normal, uniform, hp);
}

}  // namespace

HostProblem make_random_problem(const EpilogueConfig& c) {
  HostProblem hp = allocate_problem(c);
  fill_random(c, &hp);
  return hp;
}

Status make_random_problem(const EpilogueConfig& c,
                           const std::function<Status(const HostProblem&)>& check_before_filling,
                           HostProblem* out) {
  return make_checked_random_problem(c, allocate_problem, fill_random, check_before_filling, out);
}

namespace {

// SPEC-chunk-kda.md's per-token bars (the layer's gradients), against the float64 reference.
constexpr DtypeBars kPassBars{.f32 = 1e-5, .f16 = 2e-3, .bf16 = 8e-3};

double epilogue_bar(DType x_dtype) {
  return kPassBars.of(x_dtype);
}

}  // namespace

extern const OpIo kChunkBwdEpilogueIo =
    make_op_io<P>(check_queries_values_sizes, options_from_metadata_chunk_of_A<P>,
                  options_to_metadata_as<P>, epilogue_bar, epilogue_bar);

}  // namespace kda::io
