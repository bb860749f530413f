#include "io/host_problem.hpp"

#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>

#include "core/element.hpp"

namespace kda::io {

HostTensor::HostTensor(DType d, std::vector<int64_t> s) : dtype(d), shape(std::move(s)) {
  bytes.assign(static_cast<size_t>(numel()) * dtype_size(dtype), 0);
}

// A zero extent makes the count 0 whatever the others, so it is looked for first: multiplying
// left to right, [2^40, 2^40, 0] would overflow before reaching the 0. A tensor with elements
// holds them in memory, so its count cannot overflow.
int64_t HostTensor::numel() const {
  for (int64_t extent : shape) {
    if (extent == 0) return 0;
  }
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

// Row-major strides. Only a tensor without elements can have extents whose product overflows
// ([0, 2^40, 2^20, 16]; the reader refuses such shapes, but a HostTensor can be built with
// one): from there on the strides saturate at the int64 maximum, which validation refuses as
// spanning more than any memory, instead of wrapping (undefined behaviour).
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
    if (__builtin_mul_overflow(stride, shape[d], &stride)) {
      stride = std::numeric_limits<int64_t>::max();
    }
  }
  return t;
}

namespace {

// What load_double and store_float read of a view: its data and dtype. One element's access
// builds only these (the full view's shape and strides cost more than the element itself, and
// a generated problem or a check walks hundreds of millions of elements).
TensorView element_access(const HostTensor& t) {
  TensorView v;
  v.data = const_cast<uint8_t*>(t.bytes.data());
  v.dtype = t.dtype;
  return v;
}

}  // namespace

double HostTensor::at(int64_t i) const {
  return load_double(element_access(*this), i);
}

void HostTensor::set(int64_t i, double value) {
  const TensorView t = element_access(*this);
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

std::map<std::string, TensorView> HostProblem::views(Device device) const {
  std::map<std::string, TensorView> out;
  for (const auto& [name, t] : tensors) out[name] = t.view(device);
  return out;
}

void HostProblem::allocate_outputs() {
  op_of(*this).allocate_outputs(this);
}

std::vector<std::string> HostProblem::output_names() const {
  return op_of(*this).output_names();
}

HostTensor poisoned(DType dtype, std::vector<int64_t> shape) {
  HostTensor t(dtype, std::move(shape));
  for (int64_t i = 0, n = t.numel(); i < n; ++i) t.set(i, std::numeric_limits<double>::quiet_NaN());
  return t;
}

// The operators' registrations, k<Cxx>Io in their folders (ops/<op>/host.cpp), for every
// operator of KDA_OPS, in its order.
#define KDA_DECLARE_OP_IO(UP, op, Cxx, fla, spec) extern const OpIo k##Cxx##Io;
KDA_OPS(KDA_DECLARE_OP_IO)
#undef KDA_DECLARE_OP_IO

std::span<const OpIo* const> ops() {
#define KDA_OP_IO_ENTRY(UP, op, Cxx, fla, spec) &k##Cxx##Io,
  static const OpIo* const all[] = {KDA_OPS(KDA_OP_IO_ENTRY)};
#undef KDA_OP_IO_ENTRY
  return all;
}

const OpIo* find_op(std::string_view name) {
  for (const OpIo* op : ops()) {
    if (name == op->name) return op;
  }
  return nullptr;
}

const OpIo& op_of(const HostProblem& hp) {
  const OpIo* op = find_op(hp.op);
  if (op == nullptr) throw std::invalid_argument("unknown operator '" + hp.op + "'");
  return *op;
}

double err_ratio(const HostTensor& x, const HostTensor& ref) {
  if (x.numel() != ref.numel()) return std::numeric_limits<double>::quiet_NaN();
  double num = 0.0, den = 0.0;
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
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

}  // namespace kda::io
