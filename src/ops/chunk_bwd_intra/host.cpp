// chunk_bwd_intra's part of the host-side tooling (io/host_problem.hpp): its outputs, options,
// file checks, byte count, bars and random problems. Compiled into kda_io, not libkda.

#include <cmath>
#include <limits>
#include <random>

#include "core/chunk_plan.hpp"
#include "io/host_problem.hpp"
#include "io/metadata.hpp"
#include "io/op_io_support.hpp"

namespace kda::io {

namespace {

using P = ChunkBwdIntraProblem;

// The outputs copy the incoming gradients' shapes: those must agree with q and g before any is
// allocated, so a hostile file cannot make us allocate far more than it holds.
Status check_output_sizes(const HostProblem& p) {
  const HostTensor& q = p.get("q");
  const HostTensor& g = p.get("g");
  if (q.shape.size() != 4)
    return file_error("input \"q\": expected rank 4 [B, T, H, K], got " + shape_text(q.shape));
  if (g.shape.size() != 4)
    return file_error("input \"g\": expected rank 4 [B, T, HV, K], got " + shape_text(g.shape));
  const int64_t B = q.shape[0], T = q.shape[1], K = q.shape[3], HV = g.shape[2];
  if (g.shape != std::vector<int64_t>{B, T, HV, K}) {
    return file_error("input \"g\": expected [B, T, HV, K] with B, T, K = " +
                      shape_text({B, T, K}) + " from q, got " + shape_text(g.shape));
  }
  for (const char* name : {"dq", "dk", "dg"}) {
    if (p.get(name).shape != g.shape) {
      return file_error(std::string("input \"") + name + "\": expected the shape of g " +
                        shape_text(g.shape) + ", got " + shape_text(p.get(name).shape));
    }
  }
  if (p.get("db").shape != std::vector<int64_t>{B, T, HV}) {
    return file_error("input \"db\": expected [B, T, HV] = " + shape_text({B, T, HV}) + ", got " +
                      shape_text(p.get("db").shape));
  }
  return Status::Ok();
}

// Metadata `chunk_size` (absent: dAqk.shape[-1]) and `safe_gate` (absent: false); `gate` must be
// log2 and `dg` the natural-log convention where given.
Status options_from_metadata(const Metadata& m, HostProblem* hp) {
  if (Status s =
          metadata_expect(m, "gate", "log2", "this operator takes g in log2 space (\"log2\")");
      !s.ok()) {
    return s;
  }
  const HostTensor& dAqk = hp->get("dAqk");
  if (dAqk.shape.empty()) return file_error("input \"dAqk\" is a scalar; expected [B, T, HV, BT]");
  return options_from_metadata_as<P>(m, {{"chunk_size", dAqk.shape.back()}}, hp);
}

void options_to_metadata(const HostProblem& hp, Metadata* m) {
  options_to_metadata_as<P>(hp, m);
  (*m)["gate"] = "log2";
  (*m)["dg"] = "natural-log convention: dL/d(g*ln2)";
}

// Every tensor at its size, zero-filled, with cu_seqlens / chunk_indices set and the outputs
// poisoned. Throws std::invalid_argument for bad seqlens.
HostProblem allocate_problem(const IntraConfig& c) {
  HostProblem hp;
  hp.op = P::kName;
  hp.options = {{"chunk_size", c.BT}, {"safe_gate", c.safe_gate}};
  int64_t B = c.B, T = c.T;
  if (!c.seqlens.empty()) {
    B = 1;
    T = add_varlen_index_tensors(c.seqlens, c.BT, c.index_dtype, c.pass_chunk_indices, &hp).first;
  }
  const int64_t HV = c.HV == 0 ? c.H : c.HV;
  for (const char* name : {"q", "k"}) hp.tensors[name] = HostTensor(c.x_dtype, {B, T, c.H, c.K});
  hp.tensors["g"] = HostTensor(DType::f32, {B, T, HV, c.K});
  hp.tensors["beta"] = HostTensor(c.beta_dtype, {B, T, HV});
  for (const char* name : {"dAqk", "dAkk"})
    hp.tensors[name] = HostTensor(DType::f32, {B, T, HV, c.BT});
  for (const char* name : {"dq", "dk", "dg"})
    hp.tensors[name] = HostTensor(DType::f32, {B, T, HV, c.K});
  hp.tensors["db"] = HostTensor(DType::f32, {B, T, HV});
  hp.allocate_outputs();
  return hp;
}

// The inputs' random values, drawn in a fixed order from one generator seeded with c.seed.
void fill_random(const IntraConfig& c, HostProblem* hp) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  HostTensor& q = hp->get("q");
  const int64_t B = q.shape[0], T = q.shape[1], H = q.shape[2], K = q.shape[3];
  const int64_t HV = hp->get("g").shape[2], BT = c.BT;

  // q, k: unit-norm rows over K (then rounded to X).
  for (const char* name : {"q", "k"}) {
    HostTensor& t = hp->get(name);
    std::vector<double> row(static_cast<size_t>(K));
    for (int64_t r = 0; r < B * T * H; ++r) {
      double norm = 0.0;
      for (double& x : row) {
        x = normal(rng);
        norm += x * x;
      }
      norm = std::sqrt(norm);
      for (int64_t e = 0; e < K; ++e) t.set(r * K + e, row[static_cast<size_t>(e)] / norm);
    }
  }
  const TensorView cu = hp->has("cu_seqlens") ? hp->get("cu_seqlens").view() : TensorView{};
  const int64_t NT = T == 0 ? 0 : (T + BT - 1) / BT;
  const std::vector<ChunkTask> chunks = plan_chunks(cu, B, T, BT, NT);

  // g: chunk-local cumsum of log2 decays.
  constexpr double kLn2 = 0.6931471805599453;
  HostTensor& g = hp->get("g");
  for (const ChunkTask& ch : chunks) {
    for (int64_t hv = 0; hv < HV; ++hv) {
      for (int64_t k = 0; k < K; ++k) {
        const bool strong = c.strong_every > 0 && (hv + k) % c.strong_every == 1 % c.strong_every;
        double sum = 0.0;
        for (int64_t t = ch.t0; t < ch.t0 + ch.len; ++t) {
          const double ln_decay =
              strong ? -4.6 - 0.4 * uniform(rng) : -std::exp(std::log(1e-3) * uniform(rng));
          sum += ln_decay / kLn2;
          g.set(((ch.b * T + t) * HV + hv) * K + k, sum);
        }
      }
    }
  }
  HostTensor& beta = hp->get("beta");
  for (int64_t i = 0, n = beta.numel(); i < n; ++i) beta.set(i, 0.05 + 0.9 * uniform(rng));

  // dA: N(0, 1) where j <= i inside the chunk, garbage everywhere else of the BT columns.
  const double garbage[] = {std::numeric_limits<double>::quiet_NaN(),
                            std::numeric_limits<double>::infinity(), 100.0,
                            -std::numeric_limits<double>::infinity()};
  for (const char* name : {"dAqk", "dAkk"}) {
    HostTensor& t = hp->get(name);
    int64_t n_garbage = 0;
    for (const ChunkTask& ch : chunks) {
      for (int64_t i = 0; i < ch.len; ++i) {
        for (int64_t hv = 0; hv < HV; ++hv) {
          for (int64_t j = 0; j < BT; ++j) {
            const double value = j <= i ? normal(rng) : garbage[n_garbage++ % 4];
            t.set(((ch.b * T + ch.t0 + i) * HV + hv) * BT + j, value);
          }
        }
      }
    }
  }
  for (auto [name, rms] : {std::pair{"dq", 0.1}, {"dk", 0.1}, {"db", 0.1}, {"dg", 0.02}}) {
    HostTensor& t = hp->get(name);
    for (int64_t i = 0, n = t.numel(); i < n; ++i) t.set(i, rms * normal(rng));
  }
}

}  // namespace

HostProblem make_random_problem(const IntraConfig& c) {
  HostProblem hp = allocate_problem(c);
  fill_random(c, &hp);
  return hp;
}

Status make_random_problem(const IntraConfig& c,
                           const std::function<Status(const HostProblem&)>& check_before_filling,
                           HostProblem* out) {
  return make_checked_random_problem(c, allocate_problem, fill_random, check_before_filling, out);
}

// SPEC-chunk-bwd-intra.md's bars: against the float64 reference, and against fla's golden files.
constexpr DtypeBars kPassBars{.f32 = 1e-5, .f16 = 1.5e-3, .bf16 = 2e-3};
constexpr DtypeBars kGoldenBars{.f32 = 1e-5, .f16 = 5e-4, .bf16 = 2e-3};

double intra_pass_bar(DType x_dtype) {
  return kPassBars.of(x_dtype);
}

double intra_golden_bar(DType x_dtype) {
  return kGoldenBars.of(x_dtype);
}

extern const OpIo kChunkBwdIntraIo =
    make_op_io<P>(check_output_sizes, options_from_metadata, options_to_metadata, intra_pass_bar,
                  intra_golden_bar);

}  // namespace kda::io
