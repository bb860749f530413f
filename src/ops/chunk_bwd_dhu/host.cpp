// chunk_bwd_dhu's part of the host-side tooling (io/host_problem.hpp): its file checks, options,
// bars and random problems. Compiled into kda_io, not libkda.

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>
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

using P = ChunkBwdDhuProblem;

// A file may ask for outputs of at most this many times its inputs' bytes, plus 64 MiB
// (io/scan_file_checks.hpp). A valid problem of length-1 sequences needs up to about 3 K V / (K +
// 2 V) <= 256 times (dh and dh0 per token against q, k, w, do, dv); one of empty sequences, whose
// dh0 has no token to match, only within the slack.
constexpr double kOutputsPerInputByte = 256.0;

Status check_output_sizes(const HostProblem& hp) {
  return check_scan_output_sizes<P>(hp, {"q", {"do", "dv"}, "dh", "dh0", kOutputsPerInputByte});
}

// Metadata: every option by its table name (chunk_size absent: the table's 64).
Status options_from_metadata(const Metadata& m, HostProblem* hp) {
  return options_from_metadata_as<P>(m, {}, hp);
}

void options_to_metadata(const HostProblem& hp, Metadata* m) {
  options_to_metadata_as<P>(hp, m);
}

// Every tensor of a generated problem at its size: inputs zero, cu_seqlens / chunk_indices set,
// outputs allocated (dh's chunk count from the host cu_seqlens) and poisoned. Throws
// std::invalid_argument for bad seqlens.
HostProblem allocate_problem(const DhuConfig& c) {
  HostProblem hp;
  hp.op = P::kName;
  hp.options = {{"scale", c.scale}, {"chunk_size", c.BT}, {"state_v_first", c.state_v_first}};
  int64_t B = c.B, T = c.T, N = c.B;
  if (!c.seqlens.empty()) {
    B = 1;
    N = static_cast<int64_t>(c.seqlens.size());
    T = add_varlen_index_tensors(c.seqlens, c.BT, c.index_dtype, c.pass_chunk_indices, &hp).first;
  }
  const int64_t HV = c.HV ? c.HV : c.H;
  for (const char* name : {"q", "k"}) hp.tensors[name] = HostTensor(c.x_dtype, {B, T, c.H, c.K});
  hp.tensors["w"] = HostTensor(c.x_dtype, {B, T, HV, c.K});
  for (const char* name : {"do", "dv"}) hp.tensors[name] = HostTensor(c.x_dtype, {B, T, HV, c.V});
  if (c.use_g) hp.tensors["g"] = HostTensor(DType::f32, {B, T, HV});
  if (c.use_gk) hp.tensors["gk"] = HostTensor(DType::f32, {B, T, HV, c.K});
  const std::vector<int64_t> state = c.state_v_first ? std::vector<int64_t>{N, HV, c.V, c.K}
                                                     : std::vector<int64_t>{N, HV, c.K, c.V};
  if (c.with_h0) hp.tensors["h0"] = HostTensor(c.state_dtype, state);
  if (c.with_dht) hp.tensors["dht"] = HostTensor(c.state_dtype, state);
  hp.allocate_outputs();
  return hp;
}

// The inputs' random values, drawn in a fixed order from one generator seeded with c.seed.
void fill_random(const DhuConfig& c, HostProblem* hp) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  auto fill = [&](const char* name, double rms) {
    HostTensor& t = hp->get(name);
    for (int64_t i = 0, n = t.numel(); i < n; ++i) t.set(i, rms * normal(rng));
  };
  const int64_t K = hp->get("q").shape[3];
  fill("q", 1.0);
  fill("k", 1.0 / std::sqrt(static_cast<double>(K)));
  fill("w", 1.0 / std::sqrt(static_cast<double>(K * c.BT)));
  fill("do", 1.0);
  fill("dv", 1.0);

  fill_scan_gates("q", c.BT, rng, uniform, hp);

  for (const char* name : {"h0", "dht"}) {
    if (hp->has(name)) fill(name, 1.0);
  }
}

}  // namespace

HostProblem make_random_problem(const DhuConfig& c) {
  HostProblem hp = allocate_problem(c);
  fill_random(c, &hp);
  return hp;
}

Status make_random_problem(const DhuConfig& c,
                           const std::function<Status(const HostProblem&)>& check_before_filling,
                           HostProblem* out) {
  return make_checked_random_problem(c, allocate_problem, fill_random, check_before_filling, out);
}

namespace {

// SPEC-chunk-kda.md's per-token bars (the layer's gradients), against the float64 reference.
constexpr DtypeBars kPassBars{.f32 = 1e-5, .f16 = 2e-3, .bf16 = 8e-3};

double dhu_bar(DType x_dtype) {
  return kPassBars.of(x_dtype);
}

}  // namespace

extern const OpIo kChunkBwdDhuIo =
    make_op_io<P>(check_output_sizes, options_from_metadata, options_to_metadata, dhu_bar, dhu_bar);

}  // namespace kda::io
