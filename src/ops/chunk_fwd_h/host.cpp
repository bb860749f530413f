// chunk_fwd_h's part of the host-side tooling (io/host_problem.hpp): its file checks, options,
// bars and random problems. Compiled into kda_io, not libkda.

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/chunk_plan.hpp"
#include "core/validate_args.hpp"
#include "io/host_problem.hpp"
#include "io/metadata.hpp"
#include "io/op_io_support.hpp"
#include "io/scan_file_checks.hpp"
#include "io/scan_random.hpp"

namespace kda::io {

namespace {

using P = ChunkFwdHProblem;

// A file may ask for outputs of at most this many times its inputs' bytes, plus 64 MiB
// (io/scan_file_checks.hpp). A valid problem of length-1 sequences needs up to about (x + 4) K V /
// ((K + V) x) + 1 <= 385 times (h and final_state per token against w and u, x bytes an element of
// X, k's heads fewer than v's); one of empty sequences, whose final_state has no token to match,
// only within the slack.
constexpr double kOutputsPerInputByte = 512.0;

Status check_output_sizes(const HostProblem& hp) {
  return check_scan_output_sizes<P>(hp, {"k", {"u"}, "h", "final_state", kOutputsPerInputByte});
}

// Metadata: every option by its table name (chunk_size absent: the table's 64).
Status options_from_metadata(const Metadata& m, HostProblem* hp) {
  return options_from_metadata_as<P>(m, {}, hp);
}

void options_to_metadata(const HostProblem& hp, Metadata* m) {
  options_to_metadata_as<P>(hp, m);
}

// Every tensor of a generated problem at its size: inputs zero, cu_seqlens / chunk_indices set,
// outputs allocated (h's chunk count from the host cu_seqlens) and poisoned. Throws
// std::invalid_argument for bad seqlens.
HostProblem allocate_problem(const FwdHConfig& c) {
  HostProblem hp;
  hp.op = P::kName;
  hp.options = {{"chunk_size", c.BT},
                {"state_v_first", c.state_v_first},
                {"output_final_state", c.output_final_state},
                {"save_new_value", c.save_new_value}};
  int64_t B = c.B, T = c.T, N = c.B;
  if (!c.seqlens.empty()) {
    B = 1;
    N = static_cast<int64_t>(c.seqlens.size());
    T = add_varlen_index_tensors(c.seqlens, c.BT, c.index_dtype, c.pass_chunk_indices, &hp).first;
  }
  const int64_t HV = c.HV ? c.HV : c.H;
  hp.tensors["k"] = HostTensor(c.x_dtype, {B, T, c.H, c.K});
  hp.tensors["w"] = HostTensor(c.x_dtype, {B, T, HV, c.K});
  hp.tensors["u"] = HostTensor(c.x_dtype, {B, T, HV, c.V});
  if (c.use_g) hp.tensors["g"] = HostTensor(DType::f32, {B, T, HV});
  if (c.use_gk) hp.tensors["gk"] = HostTensor(DType::f32, {B, T, HV, c.K});
  if (c.with_initial_state) {
    hp.tensors["initial_state"] =
        HostTensor(c.state_dtype, c.state_v_first ? std::vector<int64_t>{N, HV, c.V, c.K}
                                                  : std::vector<int64_t>{N, HV, c.K, c.V});
  }
  hp.allocate_outputs();
  return hp;
}

// The inputs' random values, drawn in a fixed order from one generator seeded with c.seed.
void fill_random(const FwdHConfig& c, HostProblem* hp) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  auto fill = [&](const char* name, double rms) {
    HostTensor& t = hp->get(name);
    for (int64_t i = 0, n = t.numel(); i < n; ++i) t.set(i, rms * normal(rng));
  };
  const int64_t K = hp->get("k").shape[3];
  fill("k", 1.0 / std::sqrt(static_cast<double>(K)));
  fill("w", 1.0 / std::sqrt(static_cast<double>(K * c.BT)));
  fill("u", 1.0);

  fill_scan_gates("k", c.BT, rng, uniform, hp);

  if (hp->has("initial_state")) fill("initial_state", 1.0);
}

}  // namespace

HostProblem make_random_problem(const FwdHConfig& c) {
  HostProblem hp = allocate_problem(c);
  fill_random(c, &hp);
  return hp;
}

Status make_random_problem(const FwdHConfig& c,
                           const std::function<Status(const HostProblem&)>& check_before_filling,
                           HostProblem* out) {
  return make_checked_random_problem(c, allocate_problem, fill_random, check_before_filling, out);
}

namespace {

// SPEC-chunk-kda.md's per-token bars (the layer's), against the float64 reference.
constexpr DtypeBars kPassBars{.f32 = 1e-5, .f16 = 2e-3, .bf16 = 8e-3};

double fwd_h_bar(DType x_dtype) {
  return kPassBars.of(x_dtype);
}

}  // namespace

extern const OpIo kChunkFwdHIo = make_op_io<P>(check_output_sizes, options_from_metadata,
                                               options_to_metadata, fwd_h_bar, fwd_h_bar);

}  // namespace kda::io
