// chunk_bwd_wy_dqkg's part of the host-side tooling (io/host_problem.hpp): its outputs, options,
// file checks, byte count, bars and random problems. Compiled into kda_io, not libkda.

#include <random>
#include <tuple>

#include "io/host_problem.hpp"
#include "io/metadata.hpp"
#include "io/op_io_support.hpp"

namespace kda::io {

namespace {

using P = ChunkBwdWyDqkgProblem;

Status expect_rank4(const HostProblem& p, const char* name, const char* symbolic) {
  const HostTensor& t = p.get(name);
  if (t.shape.size() != 4) {
    return file_error(std::string("input \"") + name + "\": expected rank 4 " + symbolic +
                      ", got " + shape_text(t.shape));
  }
  return Status::Ok();
}

// The outputs take their sizes from q, v, A; checking q, v, g, A agree first bounds every output
// by a tensor the file already holds.
Status check_output_sizes(const HostProblem& p) {
  if (Status s = expect_rank4(p, "q", "[B, T, H, K]"); !s.ok()) return s;
  if (Status s = expect_rank4(p, "v", "[B, T, HV, V]"); !s.ok()) return s;
  if (Status s = expect_rank4(p, "g", "[B, T, HV, K]"); !s.ok()) return s;
  if (Status s = expect_rank4(p, "A", "[B, T, HV, BT]"); !s.ok()) return s;
  const HostTensor& q = p.get("q");
  if (q.dtype != DType::f16 && q.dtype != DType::bf16 && q.dtype != DType::f32) {
    return file_error("input \"q\": expected dtype F16, BF16 or F32, got " +
                      std::string(dtype_name(q.dtype)));
  }
  const auto& v = p.get("v").shape;
  const auto& g = p.get("g").shape;
  const auto& A = p.get("A").shape;
  const int64_t B = q.shape[0], T = q.shape[1], K = q.shape[3], HV = v[2];
  if (v[0] != B || v[1] != T) {
    return file_error("input \"v\": expected [B, T, HV, V] with B, T = " + std::to_string(B) +
                      ", " + std::to_string(T) + " from q, got " + shape_text(v));
  }
  if (g != std::vector<int64_t>{B, T, HV, K}) {
    return file_error("input \"g\": expected [B, T, HV, K] = " + shape_text({B, T, HV, K}) +
                      " (from q and v), got " + shape_text(g));
  }
  if (A[0] != B || A[1] != T || A[2] != HV) {
    return file_error("input \"A\": expected [B, T, HV, BT] with B, T, HV = " +
                      shape_text({B, T, HV}) + " (from q and v), got " + shape_text(A));
  }
  return Status::Ok();
}

// Metadata `scale` (absent or "None": K ** -0.5), `chunk_size` (absent: A.shape[-1]),
// `state_v_first` (absent: false); `gate` must be log2 where given.
Status options_from_metadata(const Metadata& m, HostProblem* hp) {
  if (Status s =
          metadata_expect(m, "gate", "log2", "this operator takes g in log2 space (\"log2\")");
      !s.ok()) {
    return s;
  }
  return options_from_metadata_chunk_of_A<P>(m, hp);
}

void options_to_metadata(const HostProblem& hp, Metadata* m) {
  options_to_metadata_as<P>(hp, m);
  (*m)["gate"] = "log2";
}

// Every tensor of a generated problem at its size: inputs zero, cu_seqlens / chunk_indices set,
// outputs allocated and poisoned. Throws std::invalid_argument for bad seqlens.
HostProblem allocate_problem(const WyDqkgConfig& c) {
  HostProblem hp;
  hp.op = P::kName;
  const int64_t HV = c.HV ? c.HV : c.H;
  int64_t B = c.B, T = c.T, NT = (c.T + c.BT - 1) / c.BT;
  if (!c.seqlens.empty()) {
    B = 1;
    std::tie(T, NT) =
        add_varlen_index_tensors(c.seqlens, c.BT, DType::i64, c.pass_chunk_indices, &hp);
  }
  for (const char* name : {"q", "k"}) hp.tensors[name] = HostTensor(c.x_dtype, {B, T, c.H, c.K});
  for (const char* name : {"v", "v_new", "do", "dv"})
    hp.tensors[name] = HostTensor(c.x_dtype, {B, T, HV, c.V});
  hp.tensors["g"] = HostTensor(DType::f32, {B, T, HV, c.K});
  hp.tensors["beta"] = HostTensor(c.beta_dtype, {B, T, HV});
  hp.tensors["A"] = HostTensor(c.x_dtype, {B, T, HV, c.BT});
  const int64_t hB = c.seqlens.empty() ? B : 1;
  const std::vector<int64_t> h_shape = c.state_v_first ? std::vector<int64_t>{hB, NT, HV, c.V, c.K}
                                                       : std::vector<int64_t>{hB, NT, HV, c.K, c.V};
  hp.tensors["h"] = HostTensor(c.h_dtype, h_shape);
  hp.tensors["dh"] = HostTensor(c.h_dtype, h_shape);
  hp.options = {{"scale", c.scale}, {"chunk_size", c.BT}, {"state_v_first", c.state_v_first}};
  hp.allocate_outputs();
  return hp;
}

// The inputs' random values, drawn in a fixed order from one generator seeded with c.seed.
void fill_random(const WyDqkgConfig& c, HostProblem* hp) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  auto fill = [&](const char* name, auto draw) {
    HostTensor& t = hp->get(name);
    for (int64_t i = 0, n = t.numel(); i < n; ++i) t.set(i, draw());
  };
  auto unit_normal = [&] { return normal(rng); };
  for (const char* name : {"q", "k", "v", "v_new", "do", "dv"}) fill(name, unit_normal);
  fill("g", [&] { return -(0.05 + 2.45 * uniform(rng)); });
  fill("beta", [&] { return 0.05 + 0.9 * uniform(rng); });
  fill("A", [&] { return 0.1 * normal(rng); });
  fill("h", unit_normal);
  fill("dh", unit_normal);
}

}  // namespace

HostProblem make_random_problem(const WyDqkgConfig& c) {
  HostProblem hp = allocate_problem(c);
  fill_random(c, &hp);
  return hp;
}

Status make_random_problem(const WyDqkgConfig& c,
                           const std::function<Status(const HostProblem&)>& check_before_filling,
                           HostProblem* out) {
  return make_checked_random_problem(c, allocate_problem, fill_random, check_before_filling, out);
}

// SPEC.md's bars: against the float64 reference, and against fla's golden files.
constexpr DtypeBars kPassBars{.f32 = 1e-5, .f16 = 1e-3, .bf16 = 8e-3};
constexpr DtypeBars kGoldenBars{.f32 = 1e-5, .f16 = 2e-3, .bf16 = 1e-2};

double pass_bar(DType x_dtype) {
  return kPassBars.of(x_dtype);
}

double golden_bar(DType x_dtype) {
  return kGoldenBars.of(x_dtype);
}

extern const OpIo kChunkBwdWyDqkgIo = make_op_io<P>(check_output_sizes, options_from_metadata,
                                                    options_to_metadata, pass_bar, golden_bar);

}  // namespace kda::io
