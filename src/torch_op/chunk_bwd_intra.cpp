// torch.ops.kda_kernels.chunk_kda_bwd_intra: chunk_bwd_intra on torch tensors.

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <string_view>
#include <tuple>

#include "kda/ops/chunk_bwd_intra.hpp"
#include "torch_op/not_differentiable.hpp"
#include "torch_op/options.hpp"
#include "torch_op/outputs.hpp"
#include "torch_op/probe.hpp"
#include "torch_op/status.hpp"
#include "torch_op/stream.hpp"
#include "torch_op/tensors.hpp"

namespace kda::torch_op {

namespace {

using Problem = ChunkBwdIntraProblem;
constexpr const char* kOp = Problem::kFlaName;
using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// The arguments in the public function's order (SPEC-chunk-bwd-intra.md), then backend and the
// kernel choice. Checks in the ctypes path's order: options, inputs, outputs; then libkda
// validates and runs.
Outputs chunk_kda_bwd_intra(const at::Tensor& q, const at::Tensor& k, const at::Tensor& g,
                            const at::Tensor& beta, const at::Tensor& dAqk, const at::Tensor& dAkk,
                            const at::Tensor& dq, const at::Tensor& dk, const at::Tensor& db,
                            const at::Tensor& dg, const std::optional<at::Tensor>& cu_seqlens,
                            const std::optional<at::Tensor>& chunk_indices, int64_t chunk_size,
                            bool safe_gate, std::optional<std::string_view> backend_name,
                            std::string_view kernel_name) {
  probe::Laps laps;
  const Backend backend = backend_of(backend_name, q, kOp);
  const Kernel kernel = kernel_of(kernel_name, kOp);
  Problem p;
  p.q = input_view(q, kOp, "q", kDtypesX);
  p.k = input_view(k, kOp, "k", kDtypesOfQ);
  p.g = input_view(g, kOp, "g", kDtypesF32);
  p.beta = input_view(beta, kOp, "beta", kDtypesOfQOrF32);
  p.dAqk = input_view(dAqk, kOp, "dAqk", kDtypesF32);
  p.dAkk = input_view(dAkk, kOp, "dAkk", kDtypesF32);
  p.dq = input_view(dq, kOp, "dq", kDtypesF32);
  p.dk = input_view(dk, kOp, "dk", kDtypesF32);
  p.db = input_view(db, kOp, "db", kDtypesF32);
  p.dg = input_view(dg, kOp, "dg", kDtypesF32);
  p.cu_seqlens = input_view(cu_seqlens, kOp, "cu_seqlens", kDtypesIndex);
  p.chunk_indices = input_view(chunk_indices, kOp, "chunk_indices", kDtypesIndex);
  p.chunk_size = chunk_size;
  p.safe_gate = safe_gate;

  // SPEC-chunk-bwd-intra.md's shapes: [B, T, HV, K] per value head, all float32.
  const int64_t B = extent(q, 4, 0), T = extent(q, 4, 1), K = extent(q, 4, 3);
  const int64_t HV = extent(g, 4, 2);
  const at::ScalarType f32 = at::kFloat;
  const std::array<OutputSpec<Problem>, 4> specs{{{{B, T, HV, K}, 4, f32, &Problem::dq_out},
                                                  {{B, T, HV, K}, 4, f32, &Problem::dk_out},
                                                  {{B, T, HV}, 3, f32, &Problem::db_out},
                                                  {{B, T, HV, K}, 4, f32, &Problem::dg_out}}};
  laps.lap(probe::inputs);
  const auto out = allocate_outputs(p, q, specs, kOp);
  laps.lap(probe::outputs);
  void* const stream = stream_for(backend, q.device());
  laps.lap(probe::stream);
  check(run(p, backend, stream, kernel), kOp);
  laps.lap(probe::run);
  return {out[0], out[1], out[2], out[3]};
}

// The Autograd kernel (not_differentiable.hpp): the op below autograd, then a raising backward
// node only where grad mode is on and an input requires grad.
Outputs chunk_kda_bwd_intra_autograd(
    c10::DispatchKeySet keys, const at::Tensor& q, const at::Tensor& k, const at::Tensor& g,
    const at::Tensor& beta, const at::Tensor& dAqk, const at::Tensor& dAkk, const at::Tensor& dq,
    const at::Tensor& dk, const at::Tensor& db, const at::Tensor& dg,
    const std::optional<at::Tensor>& cu_seqlens, const std::optional<at::Tensor>& chunk_indices,
    int64_t chunk_size, bool safe_gate, std::optional<std::string_view> backend_name,
    std::string_view kernel_name) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("kda_kernels::chunk_kda_bwd_intra", "")
                             .typed<decltype(chunk_kda_bwd_intra)>();
  Outputs out;
  {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    out =
        op.redispatch(keys & c10::after_autograd_keyset, q, k, g, beta, dAqk, dAkk, dq, dk, db, dg,
                      cu_seqlens, chunk_indices, chunk_size, safe_gate, backend_name, kernel_name);
  }
  mark_not_differentiable(
      kOp, {&q, &k, &g, &beta, &dAqk, &dAkk, &dq, &dk, &db, &dg},
      {&std::get<0>(out), &std::get<1>(out), &std::get<2>(out), &std::get<3>(out)});
  return out;
}

}  // namespace

}  // namespace kda::torch_op

TORCH_LIBRARY_FRAGMENT(kda_kernels, m) {
  // The fake (meta) implementation, for torch.compile, is registered from Python there.
  m.set_python_module("kda_kernels._torch_op");
  m.def(
      "chunk_kda_bwd_intra(Tensor q, Tensor k, Tensor g, Tensor beta, Tensor dAqk, Tensor dAkk, "
      "Tensor dq, Tensor dk, Tensor db, Tensor dg, Tensor? cu_seqlens=None, "
      "Tensor? chunk_indices=None, SymInt chunk_size=64, bool safe_gate=False, "
      "str? backend=None, str cuda_kernel=\"auto\") -> (Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(kda_kernels, CPU, m) {
  m.impl("chunk_kda_bwd_intra", TORCH_FN(kda::torch_op::chunk_kda_bwd_intra));
}

TORCH_LIBRARY_IMPL(kda_kernels, CUDA, m) {
  m.impl("chunk_kda_bwd_intra", TORCH_FN(kda::torch_op::chunk_kda_bwd_intra));
}

// Not differentiable (it is itself a backward step): a call with inputs that require grad gives
// outputs whose backward raises, as the python op's does, instead of torch's default fallback,
// which only warns and lets gradients through it be silently wrong.
TORCH_LIBRARY_IMPL(kda_kernels, Autograd, m) {
  m.impl("chunk_kda_bwd_intra", TORCH_FN(kda::torch_op::chunk_kda_bwd_intra_autograd));
}
