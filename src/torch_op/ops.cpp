// torch.ops.kda_kernels.<fla name>: every operator of kda/ops.h on torch tensors, registered
// from its table (kda/args.h): the schema, one boxed kernel for CPU and CUDA, and a boxed Autograd
// kernel. Arguments in the public function's order (the table's rows), then backend and the
// kernel choice; checks in the ctypes path's order: options, inputs, outputs; then libkda
// validates and runs.

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kda/kda.hpp"
#include "torch_op/not_differentiable.hpp"
#include "torch_op/options.hpp"
#include "torch_op/outputs.hpp"
#include "torch_op/probe.hpp"
#include "torch_op/status.hpp"
#include "torch_op/stream.hpp"
#include "torch_op/tensors.hpp"

namespace kda::torch_op {

namespace {

// What an input of operator P of `type` takes, as the messages say it (tensors.hpp), naming P's
// anchor (its table's first row: q, or chunk_fwd_h's k) where X is meant.
template <typename P>
const char* dtypes_of(ArgType type) {
  static const std::array<std::string, 2> of_anchor = [] {
    const std::string anchor = P::args()[0].info.name;
    return std::array<std::string, 2>{
        std::string(kDtypesX) + " (the dtype of " + anchor + ")",
        std::string(kDtypesX) + " (the dtype of " + anchor + ", or float32)"};
  }();
  switch (type) {
    case ArgType::x:
      return kDtypesX;
    case ArgType::of_q:
      return of_anchor[0].c_str();
    case ArgType::of_q_or_f32:
      return of_anchor[1].c_str();
    case ArgType::of_h:
      return kDtypesOfH;
    case ArgType::index:
      return kDtypesIndex;
    default:
      return kDtypesF32;
  }
}

// One row of operator P's table but the outputs, in the table's order (the order of the op's
// arguments): a tensor (its index in P::args()) or an option (its index in P::options()).
struct Row {
  bool is_option;
  size_t index;
};

template <typename P>
const std::vector<Row>& rows_of() {
  static const std::vector<Row> rows = [] {
    std::vector<Row> out;
    size_t tensor = 0, option = 0;
    for (int32_t i = 0, n = kda_op_num_args(OpTraits<P>::code); i < n; ++i) {
      kda_arg_info row{};
      TORCH_INTERNAL_ASSERT(kda_op_arg(OpTraits<P>::code, i, &row) == KDA_STATUS_OK);
      if (row.role == KDA_ARG_OUTPUT) continue;
      out.push_back(row.role == KDA_ARG_OPTION ? Row{true, option++} : Row{false, tensor++});
    }
    return out;
  }();
  return rows;
}

// The schema of operator P: "<fla name>(Tensor q, ..., float? scale=None, Tensor? cu_seqlens=None,
// SymInt chunk_size=64, ..., str? backend=None, str cuda_kernel=\"auto\") -> (Tensor, ...)". The
// public keyword `kernel` is `cuda_kernel` here: Inductor's fallback for custom ops takes a
// parameter named `kernel` of its own.
template <typename P>
std::string schema_of() {
  std::string params;
  for (const Row& row : rows_of<P>()) {
    if (!params.empty()) params += ", ";
    if (row.is_option) {
      const ArgInfo& o = P::options()[row.index].info;
      const std::string name = o.name, rule = o.rule;
      if (o.type == ArgType::boolean)
        params += "bool " + name + (rule == "true" ? "=True" : "=False");
      if (o.type == ArgType::integer) params += "SymInt " + name + "=" + rule;
      if (o.type == ArgType::float_or_none) params += "float? " + name + "=None";
      continue;
    }
    const ArgInfo& a = P::args()[row.index].info;
    params += (a.role == ArgRole::optional ? "Tensor? " : "Tensor ") + std::string(a.name) +
              (a.role == ArgRole::optional ? "=None" : "");
  }
  std::string returns;
  for (const Arg<P>& a : P::args()) {
    if (a.info.role == ArgRole::output) returns += returns.empty() ? "Tensor" : ", Tensor";
  }
  return std::string(OpTraits<P>::fla_name) + "(" + params +
         ", str? backend=None, str cuda_kernel=\"auto\") -> (" + returns + ")";
}

int64_t int_of(const c10::IValue& value) {
  return value.isSymInt() ? value.toSymInt().guard_int(__FILE__, __LINE__) : value.toInt();
}

// The CPU and CUDA kernel of operator P: the arguments off the stack, the problem from them, the
// outputs allocated from the table's rules, libkda's run, the outputs onto the stack.
template <typename P>
void run_boxed(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  constexpr const char* op = OpTraits<P>::fla_name;
  probe::Laps laps;
  const std::vector<Row>& rows = rows_of<P>();
  const size_t n = rows.size() + 2;  // then backend, cuda_kernel
  const auto arguments = torch::jit::last(*stack, n);
  const at::Tensor q = arguments[0].isNone() ? at::Tensor() : arguments[0].toTensor();
  const std::optional<std::string_view> backend_name =
      arguments[n - 2].isNone() ? std::nullopt
                                : std::optional<std::string_view>(arguments[n - 2].toStringView());
  const Backend backend = backend_of(backend_name, q, op);
  const Kernel kernel = kernel_of(arguments[n - 1].toStringView(), op);
  P p;
  for (size_t i = 0; i < rows.size(); ++i) {
    const c10::IValue& value = arguments[i];
    if (rows[i].is_option) {
      const Option<P>& o = P::options()[rows[i].index];
      if (o.as_bool) p.*o.as_bool = value.toBool();
      if (o.as_int) p.*o.as_int = int_of(value);
      if (o.as_float) {
        p.*o.as_float = value.isNone() ? std::nullopt : std::optional<double>(value.toDouble());
      }
      continue;
    }
    const Arg<P>& a = P::args()[rows[i].index];
    if (a.info.role == ArgRole::optional && value.isNone()) continue;
    // None for a required tensor is input_view's TypeError naming it.
    a.of(p) = input_view(value.isNone() ? at::Tensor() : value.toTensor(), op, a.info.name,
                         dtypes_of<P>(a.info.type));
  }
  laps.lap(probe::inputs);
  std::vector<OutputSpec<P>> specs;
  for (const Arg<P>& a : P::args()) {
    if (a.info.role != ArgRole::output) continue;
    OutputSpec<P> spec{};
    const OutputShape shape = output_shape(p, a);
    // An extent whose input has the wrong rank gives an empty output, and libkda's error naming
    // the input, never an allocation sized by a wrong extent.
    for (int d = 0; d < shape.rank; ++d) {
      spec.sizes[static_cast<size_t>(d)] =
          std::max<int64_t>(shape.extents[static_cast<size_t>(d)], 0);
    }
    spec.rank = static_cast<size_t>(shape.rank);
    spec.dtype = a.info.type == ArgType::of_q ? q.scalar_type() : at::kFloat;
    spec.member = a.member;
    specs.push_back(spec);
  }
  std::vector<at::Tensor> out = allocate_outputs(p, q, specs, op);
  laps.lap(probe::outputs);
  void* const stream = stream_for(backend, q.device());
  laps.lap(probe::stream);
  check(run(p, backend, stream, kernel), op);
  laps.lap(probe::run);
  torch::jit::drop(*stack, n);
  for (at::Tensor& t : out) torch::jit::push(*stack, std::move(t));
}

// The Autograd kernel (not_differentiable.hpp): the op below autograd, then a raising backward
// node only where grad mode is on and an input requires grad.
template <typename P>
void autograd_boxed(const c10::OperatorHandle& handle, c10::DispatchKeySet keys,
                    torch::jit::Stack* stack) {
  const size_t n = rows_of<P>().size() + 2;
  // The usual case, a call from inside a backward pass (grad mode off) or on inputs that do not
  // require grad, reads the stack only: no tensor is copied.
  bool marks = at::GradMode::is_enabled();
  if (marks) {
    marks = false;
    for (const c10::IValue& value : torch::jit::last(*stack, n)) {
      marks = marks || (value.isTensor() && value.toTensor().requires_grad());
    }
  }
  std::vector<at::Tensor> inputs;
  if (marks) {
    for (const c10::IValue& value : torch::jit::last(*stack, n)) {
      if (value.isTensor()) inputs.push_back(value.toTensor());
    }
  }
  {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    handle.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
  }
  if (!marks) return;
  size_t outputs = 0;
  for (const Arg<P>& a : P::args()) outputs += a.info.role == ArgRole::output;
  // The stack's tensors share their TensorImpl with these: the history set here is theirs.
  std::vector<at::Tensor> results;
  for (const c10::IValue& value : torch::jit::last(*stack, outputs)) {
    results.push_back(value.toTensor());
  }
  mark_not_differentiable(OpTraits<P>::fla_name, inputs, results);
}

template <typename P>
void define_op(torch::Library& m) {
  m.def(schema_of<P>().c_str());
}

template <typename P>
void implement_op(torch::Library& m) {
  m.impl(OpTraits<P>::fla_name, torch::CppFunction::makeFromBoxedFunction<&run_boxed<P>>());
}

template <typename P>
void implement_autograd(torch::Library& m) {
  m.impl(OpTraits<P>::fla_name, torch::CppFunction::makeFromBoxedFunction<&autograd_boxed<P>>());
}

}  // namespace

}  // namespace kda::torch_op

#define KDA_TORCH_DEFINE(UP, op, Cxx, fla, spec) kda::torch_op::define_op<kda::Cxx##Problem>(m);
#define KDA_TORCH_IMPL(UP, op, Cxx, fla, spec) kda::torch_op::implement_op<kda::Cxx##Problem>(m);
#define KDA_TORCH_AUTOGRAD(UP, op, Cxx, fla, spec) \
  kda::torch_op::implement_autograd<kda::Cxx##Problem>(m);

TORCH_LIBRARY_FRAGMENT(kda_kernels, m) {
  // The fake (meta) implementations, for torch.compile, are registered from Python there.
  m.set_python_module("kda_kernels._torch_op");
  KDA_OPS(KDA_TORCH_DEFINE)
}

TORCH_LIBRARY_IMPL(kda_kernels, CPU, m){KDA_OPS(KDA_TORCH_IMPL)}

TORCH_LIBRARY_IMPL(kda_kernels, CUDA, m){KDA_OPS(KDA_TORCH_IMPL)}

// Not differentiable (each is itself a backward step): a call with inputs that require grad gives
// outputs whose backward raises, as the python op's does, instead of torch's default fallback,
// which only warns and lets gradients through it be silently wrong.
TORCH_LIBRARY_IMPL(kda_kernels, Autograd, m) {
  KDA_OPS(KDA_TORCH_AUTOGRAD)
}
