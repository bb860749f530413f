// chunk_bwd_prep's part of the host-side tooling (io/host_problem.hpp): its outputs, options,
// file checks, bars and random problems. Compiled into kda_io, not libkda.

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "io/host_problem.hpp"
#include "io/layer_random.hpp"
#include "io/metadata.hpp"
#include "io/op_io_support.hpp"

namespace kda::io {

namespace {

using P = ChunkBwdPrepProblem;

HostProblem allocate_problem(const PrepConfig& c) {
  check_layer_gate_name(c.gate);
  HostProblem hp;
  hp.op = P::kName;
  const bool gate_in_kernel = c.gate != "none";
  hp.options = {{"chunk_size", c.BT},
                {"use_qk_l2norm_in_kernel", c.l2norm},
                {"use_gate_in_kernel", gate_in_kernel},
                {"use_beta_sigmoid_in_kernel", c.beta_sigmoid},
                {"allow_neg_eigval", c.allow_neg_eigval}};
  if (c.gate == "lower_bound") hp.options["lower_bound"] = std::optional<double>(-5.0);
  int64_t B = c.B, T = c.T;
  if (!c.seqlens.empty()) {
    B = 1;
    T = add_varlen_index_tensors(c.seqlens, c.BT, DType::i64, c.pass_chunk_indices, &hp).first;
  }
  const int64_t HV = c.HV == 0 ? c.H : c.HV;
  for (const char* name : {"q", "k"}) hp.tensors[name] = HostTensor(c.x_dtype, {B, T, c.H, c.K});
  for (const char* name : {"v", "do"}) hp.tensors[name] = HostTensor(c.x_dtype, {B, T, HV, c.V});
  hp.tensors["g"] = HostTensor(DType::f32, {B, T, HV, c.K});
  hp.tensors["beta"] = HostTensor(c.beta_dtype, {B, T, HV});
  for (const char* name : {"A", "Aqk"}) hp.tensors[name] = HostTensor(c.x_dtype, {B, T, HV, c.BT});
  if (gate_in_kernel) {
    hp.tensors["A_log"] = HostTensor(DType::f32, {HV});
    hp.tensors["dt_bias"] = HostTensor(DType::f32, {HV * c.K});
  }
  hp.allocate_outputs();
  return hp;
}

// Each token's position in its chunk (chunks restart at every sequence with seqlens).
std::vector<int64_t> positions_in_chunks(const PrepConfig& c, int64_t T) {
  std::vector<int64_t> position(static_cast<size_t>(T));
  if (c.seqlens.empty()) {
    for (int64_t t = 0; t < T; ++t) position[static_cast<size_t>(t)] = t % c.BT;
    return position;
  }
  int64_t bos = 0;
  for (const int64_t len : c.seqlens) {
    for (int64_t t = 0; t < len; ++t) position[static_cast<size_t>(bos + t)] = t % c.BT;
    bos += len;
  }
  return position;
}

void fill_random(const PrepConfig& c, HostProblem* hp) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (const char* name : {"q", "k", "v", "do"}) {
    HostTensor& t = hp->get(name);
    for (int64_t i = 0, n = t.numel(); i < n; ++i) t.set(i, normal(rng));
  }
  // A (the forward's Akk: unit diagonal) and Aqk, every column drawn (the operator reads only
  // j <= i inside the chunk). A's diagonal: column == the token's position in its chunk.
  const std::vector<int64_t> position = positions_in_chunks(c, hp->get("q").shape[1]);
  for (const char* name : {"A", "Aqk"}) {
    HostTensor& t = hp->get(name);
    const bool unit_diagonal = std::string_view(name) == "A";
    const int64_t HV = t.shape[2], BT = t.shape[3];
    const int64_t T = static_cast<int64_t>(position.size());
    for (int64_t i = 0, n = t.numel(); i < n; ++i) {
      const double drawn = 0.1 * normal(rng);
      const int64_t token = i / (BT * HV) % T, col = i % BT;
      t.set(i, unit_diagonal && col == position[static_cast<size_t>(token)] ? 1.0 : drawn);
    }
  }
  fill_layer_activations(c.gate, c.beta_sigmoid, c.A_log, rng, normal, uniform, hp);
}

}  // namespace

HostProblem make_random_problem(const PrepConfig& c) {
  HostProblem hp = allocate_problem(c);
  fill_random(c, &hp);
  return hp;
}

Status make_random_problem(const PrepConfig& c,
                           const std::function<Status(const HostProblem&)>& check_before_filling,
                           HostProblem* out) {
  return make_checked_random_problem(c, allocate_problem, fill_random, check_before_filling, out);
}

namespace {

// The epilogue's per-token bars (SPEC-chunk-kda.md's), against the float64 reference.
constexpr DtypeBars kPassBars{.f32 = 1e-5, .f16 = 2e-3, .bf16 = 8e-3};

double prep_bar(DType x_dtype) {
  return kPassBars.of(x_dtype);
}

}  // namespace

extern const OpIo kChunkBwdPrepIo =
    make_op_io<P>(check_queries_values_sizes, options_from_metadata_chunk_of_A<P>,
                  options_to_metadata_as<P>, prep_bar, prep_bar);

}  // namespace kda::io
