// chunk_bwd_wy_dqkg's part of the host-side tooling (io/host_problem.hpp): its outputs, options,
// file checks, byte count, bars and random problems. Compiled into kda_io, not libkda.

#include <limits>
#include <random>
#include <stdexcept>

#include "io/host_problem.hpp"
#include "io/metadata.hpp"
#include "kda/varlen.hpp"

namespace kda::io {

namespace {

using P = ChunkBwdWyDqkgProblem;

Status fail(const std::string& what) {
  return invalid_argument("safetensors: " + what);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void allocate(HostProblem* hp) {
  const HostTensor& q = hp->get("q");
  const HostTensor& v = hp->get("v");
  const int64_t B = q.shape.at(0), T = q.shape.at(1), K = q.shape.at(3);
  const int64_t HV = v.shape.at(2), V = v.shape.at(3);
  const int64_t BT = hp->get("A").shape.at(3);
  hp->tensors["out.dq"] = poisoned(DType::f32, {B, T, HV, K});
  hp->tensors["out.dk"] = poisoned(DType::f32, {B, T, HV, K});
  hp->tensors["out.dv_out"] = poisoned(q.dtype, {B, T, HV, V});
  hp->tensors["out.db"] = poisoned(DType::f32, {B, T, HV});
  hp->tensors["out.dg"] = poisoned(DType::f32, {B, T, HV, K});
  hp->tensors["out.dA"] = poisoned(DType::f32, {B, T, HV, BT});
}

Status expect_rank4(const HostProblem& p, const char* name, const char* symbolic) {
  const HostTensor& t = p.get(name);
  if (t.shape.size() != 4) {
    return fail(std::string("input \"") + name + "\": expected rank 4 " + symbolic + ", got " +
                shape_text(t.shape));
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
    return fail("input \"q\": expected dtype F16, BF16 or F32, got " +
                std::string(dtype_name(q.dtype)));
  }
  const auto& v = p.get("v").shape;
  const auto& g = p.get("g").shape;
  const auto& A = p.get("A").shape;
  const int64_t B = q.shape[0], T = q.shape[1], K = q.shape[3], HV = v[2];
  if (v[0] != B || v[1] != T) {
    return fail("input \"v\": expected [B, T, HV, V] with B, T = " + std::to_string(B) + ", " +
                std::to_string(T) + " from q, got " + shape_text(v));
  }
  if (g != std::vector<int64_t>{B, T, HV, K}) {
    return fail("input \"g\": expected [B, T, HV, K] = " + shape_text({B, T, HV, K}) +
                " (from q and v), got " + shape_text(g));
  }
  if (A[0] != B || A[1] != T || A[2] != HV) {
    return fail("input \"A\": expected [B, T, HV, BT] with B, T, HV = " + shape_text({B, T, HV}) +
                " (from q and v), got " + shape_text(A));
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
  if (Status s = metadata_optional_double(m, "scale", &hp->scale); !s.ok()) return s;
  const HostTensor& A = hp->get("A");
  if (A.shape.empty()) return fail("input \"A\" is a scalar; expected [B, T, HV, BT]");
  if (Status s = metadata_int(m, "chunk_size", A.shape.back(), &hp->chunk_size); !s.ok()) return s;
  return metadata_bool(m, "state_v_first", &hp->state_v_first);
}

void options_to_metadata(const HostProblem& hp, Metadata* m) {
  if (hp.scale) (*m)["scale"] = metadata_double_text(*hp.scale);
  (*m)["chunk_size"] = std::to_string(hp.chunk_size);
  (*m)["state_v_first"] = hp.state_v_first ? "true" : "false";
  (*m)["gate"] = "log2";
}

Status validate(const HostProblem& hp) {
  return hp.as<P>().validate();
}

Status run_op(const std::map<std::string, TensorView>& views, const HostProblem& options,
              Backend backend, void* stream, Kernel kernel) {
  return run(problem_from_views<P>(views, options), backend, stream, kernel);
}

// SPEC.md: every input read once, every output written once, at their dtypes.
std::pair<int64_t, int64_t> bytes(const HostProblem& hp) {
  int64_t read = 0, written = 0;
  for (const auto& [name, t] : hp.tensors) {
    const auto n = static_cast<int64_t>(t.bytes.size());
    (name.starts_with("out.") ? written : read) += n;
  }
  return {read, written};
}

std::vector<std::string> inputs() {
  std::vector<std::string> names = arg_names<P>(ArgRole::input);
  for (const std::string& n : arg_names<P>(ArgRole::optional)) names.push_back(n);
  return names;
}

// Every tensor of a generated problem at its size: inputs zero, cu_seqlens / chunk_indices set,
// outputs allocated and poisoned. Throws std::invalid_argument for bad seqlens.
HostProblem allocate_problem(const WyDqkgConfig& c) {
  HostProblem hp;
  hp.op = P::kName;
  const int64_t HV = c.HV ? c.HV : c.H;
  int64_t B = c.B, T = c.T, NT = 0;
  std::vector<int64_t> cu;
  if (!c.seqlens.empty()) {
    B = 1;
    cu.push_back(0);
    for (int64_t len : c.seqlens) cu.push_back(cu.back() + len);
    T = cu.back();
    std::vector<ChunkIndex> indices;
    if (Status s = chunk_indices_from_cu_seqlens(cu, c.BT, &indices); !s.ok()) {
      throw std::invalid_argument(s.message);
    }
    NT = static_cast<int64_t>(indices.size());
    HostTensor cu_t(DType::i64, {static_cast<int64_t>(cu.size())});
    for (size_t i = 0; i < cu.size(); ++i)
      cu_t.set(static_cast<int64_t>(i), static_cast<double>(cu[i]));
    hp.tensors["cu_seqlens"] = std::move(cu_t);
    if (c.pass_chunk_indices) {
      HostTensor ci(DType::i64, {NT, 2});
      for (int64_t i = 0; i < NT; ++i) {
        ci.set(2 * i, static_cast<double>(indices[i].seq));
        ci.set(2 * i + 1, static_cast<double>(indices[i].chunk));
      }
      hp.tensors["chunk_indices"] = std::move(ci);
    }
  } else {
    NT = (T + c.BT - 1) / c.BT;
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
  hp.scale = c.scale;
  hp.chunk_size = c.BT;
  hp.state_v_first = c.state_v_first;
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
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, draw());
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

void set_options(const HostProblem& hp, ChunkBwdWyDqkgProblem* p) {
  p->scale = hp.scale;
  p->chunk_size = hp.chunk_size;
  p->state_v_first = hp.state_v_first;
}

HostProblem make_random_problem(const WyDqkgConfig& c) {
  HostProblem hp = allocate_problem(c);
  fill_random(c, &hp);
  return hp;
}

Status make_random_problem(const WyDqkgConfig& c,
                           const std::function<Status(const HostProblem&)>& check_before_filling,
                           HostProblem* out) {
  HostProblem hp = allocate_problem(c);
  if (Status s = check_before_filling(hp); !s.ok()) return s;
  fill_random(c, &hp);
  *out = std::move(hp);
  return Status::Ok();
}

double pass_bar(DType x_dtype) {
  switch (x_dtype) {
    case DType::f32:
      return 1e-5;
    case DType::f16:
      return 1e-3;
    default:
      return 8e-3;
  }
}

double golden_bar(DType x_dtype) {
  switch (x_dtype) {
    case DType::f32:
      return 1e-5;
    case DType::f16:
      return 2e-3;
    default:
      return 1e-2;
  }
}

extern const OpIo kChunkBwdWyDqkgIo = {
    P::kName,
    P::kFlaName,
    "SPEC.md",
    inputs,
    [] { return arg_names<P>(ArgRole::output); },
    [] { return arg_names<P>(ArgRole::input); },
    allocate,
    check_output_sizes,
    options_from_metadata,
    options_to_metadata,
    validate,
    run_op,
    bytes,
    pass_bar,
    golden_bar,
};

}  // namespace kda::io
