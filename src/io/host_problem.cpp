#include "io/host_problem.hpp"

#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>

#include "core/element.hpp"
#include "kda/varlen.hpp"

namespace kda::io {

HostTensor::HostTensor(DType d, std::vector<int64_t> s) : dtype(d), shape(std::move(s)) {
  bytes.assign(static_cast<size_t>(numel()) * dtype_size(dtype), 0);
}

int64_t HostTensor::numel() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

TensorView HostTensor::view(Device device) const {
  TensorView t;
  t.data = const_cast<uint8_t*>(bytes.data());
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    stride *= shape[d];
  }
  return t;
}

double HostTensor::at(int64_t i) const {
  return load_double(view(), i);
}

void HostTensor::set(int64_t i, double value) {
  TensorView t = view();
  if (dtype == DType::i32) {
    static_cast<int32_t*>(t.data)[i] = static_cast<int32_t>(value);
  } else if (dtype == DType::i64) {
    static_cast<int64_t*>(t.data)[i] = static_cast<int64_t>(value);
  } else if (dtype == DType::f64) {
    static_cast<double*>(t.data)[i] = value;
  } else {
    store_float(t, i, static_cast<float>(value));
  }
}

const HostTensor& HostProblem::get(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw std::runtime_error("missing tensor '" + name + "'");
  return it->second;
}

HostTensor& HostProblem::get(const std::string& name) {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw std::runtime_error("missing tensor '" + name + "'");
  return it->second;
}

void HostProblem::allocate_outputs() {
  const HostTensor& q = get("q");
  const HostTensor& v = get("v");
  const int64_t B = q.shape.at(0), T = q.shape.at(1), K = q.shape.at(3);
  const int64_t HV = v.shape.at(2), V = v.shape.at(3);
  const int64_t BT = get("A").shape.at(3);
  auto poisoned = [](DType dtype, std::vector<int64_t> shape) {
    HostTensor t(dtype, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, std::numeric_limits<double>::quiet_NaN());
    return t;
  };
  tensors["dq"] = poisoned(DType::f32, {B, T, HV, K});
  tensors["dk"] = poisoned(DType::f32, {B, T, HV, K});
  tensors["dg"] = poisoned(DType::f32, {B, T, HV, K});
  tensors["dv_out"] = poisoned(q.dtype, {B, T, HV, V});
  tensors["db"] = poisoned(DType::f32, {B, T, HV});
  tensors["dA"] = poisoned(DType::f32, {B, T, HV, BT});
}

Problem HostProblem::problem() const {
  Problem p;
  auto view_of = [&](const char* name) {
    auto it = tensors.find(name);
    return it == tensors.end() ? TensorView{} : it->second.view();
  };
  p.q = view_of("q");
  p.k = view_of("k");
  p.v = view_of("v");
  p.v_new = view_of("v_new");
  p.g = view_of("g");
  p.beta = view_of("beta");
  p.A = view_of("A");
  p.h = view_of("h");
  p.do_ = view_of("do");
  p.dh = view_of("dh");
  p.dv = view_of("dv");
  p.cu_seqlens = view_of("cu_seqlens");
  p.chunk_indices = view_of("chunk_indices");
  p.dq = view_of("dq");
  p.dk = view_of("dk");
  p.dv_out = view_of("dv_out");
  p.db = view_of("db");
  p.dg = view_of("dg");
  p.dA = view_of("dA");
  p.scale = scale;
  p.chunk_size = chunk_size;
  p.state_v_first = state_v_first;
  return p;
}

namespace {

// Every tensor of a generated problem at its size: inputs zero, cu_seqlens / chunk_indices set,
// outputs allocated and poisoned. Throws std::invalid_argument for bad seqlens.
HostProblem allocate_problem(const ProblemConfig& c) {
  HostProblem hp;
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
void fill_random(const ProblemConfig& c, HostProblem* hp) {
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

HostProblem make_random_problem(const ProblemConfig& c) {
  HostProblem hp = allocate_problem(c);
  fill_random(c, &hp);
  return hp;
}

Status make_random_problem(const ProblemConfig& c,
                           const std::function<Status(const Problem&)>& check_before_filling,
                           HostProblem* out) {
  HostProblem hp = allocate_problem(c);
  if (Status s = check_before_filling(hp.problem()); !s.ok()) return s;
  fill_random(c, &hp);
  *out = std::move(hp);
  return Status::Ok();
}

double err_ratio(const HostTensor& x, const HostTensor& ref) {
  if (x.numel() != ref.numel()) return std::numeric_limits<double>::quiet_NaN();
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double a = x.at(i), r = ref.at(i);
    if (!std::isfinite(a) || !std::isfinite(r)) {
      // Non-finite inputs propagate (SPEC): where ref is NaN or Inf, x must be the same (both
      // NaN, or the same infinity) and the element is left out of the ratio; any other
      // disagreement on finiteness makes the ratio NaN, which no bar passes.
      if ((std::isnan(a) && std::isnan(r)) || a == r) continue;
      return std::numeric_limits<double>::quiet_NaN();
    }
    num += (a - r) * (a - r);
    den += r * r;
  }
  if (den == 0.0) return num == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
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

}  // namespace kda::io
