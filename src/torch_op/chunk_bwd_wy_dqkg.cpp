// torch.ops.kda_kernels.chunk_kda_bwd_wy_dqkg_fused: chunk_bwd_wy_dqkg on torch tensors.

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <string_view>
#include <tuple>

#include "kda/ops/chunk_bwd_wy_dqkg.hpp"
#include "torch_op/not_differentiable.hpp"
#include "torch_op/options.hpp"
#include "torch_op/outputs.hpp"
#include "torch_op/probe.hpp"
#include "torch_op/status.hpp"
#include "torch_op/stream.hpp"
#include "torch_op/tensors.hpp"

namespace kda::torch_op {

namespace {

using Problem = ChunkBwdWyDqkgProblem;
constexpr const char* kOp = Problem::kFlaName;
using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// The arguments in the public function's order (SPEC.md), then backend and the kernel choice.
// Checks in the ctypes path's order: options, inputs, outputs; then libkda validates and runs.
Outputs chunk_kda_bwd_wy_dqkg_fused(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& v_new,
    const at::Tensor& g, const at::Tensor& beta, const at::Tensor& A, const at::Tensor& h,
    const at::Tensor& do_, const at::Tensor& dh, const at::Tensor& dv, std::optional<double> scale,
    const std::optional<at::Tensor>& cu_seqlens, int64_t chunk_size,
    const std::optional<at::Tensor>& chunk_indices, bool state_v_first,
    std::optional<std::string_view> backend_name, std::string_view kernel_name) {
  probe::Laps laps;
  const Backend backend = backend_of(backend_name, q, kOp);
  const Kernel kernel = kernel_of(kernel_name, kOp);
  Problem p;
  p.q = input_view(q, kOp, "q", kDtypesX);
  p.k = input_view(k, kOp, "k", kDtypesOfQ);
  p.v = input_view(v, kOp, "v", kDtypesOfQ);
  p.v_new = input_view(v_new, kOp, "v_new", kDtypesOfQ);
  p.g = input_view(g, kOp, "g", kDtypesF32);
  p.beta = input_view(beta, kOp, "beta", kDtypesOfQOrF32);
  p.A = input_view(A, kOp, "A", kDtypesOfQ);
  p.h = input_view(h, kOp, "h", kDtypesOfQOrF32);
  p.do_ = input_view(do_, kOp, "do", kDtypesOfQ);
  p.dh = input_view(dh, kOp, "dh", kDtypesOfH);
  p.dv = input_view(dv, kOp, "dv", kDtypesOfQ);
  p.cu_seqlens = input_view(cu_seqlens, kOp, "cu_seqlens", kDtypesIndex);
  p.chunk_indices = input_view(chunk_indices, kOp, "chunk_indices", kDtypesIndex);
  p.scale = scale;
  p.chunk_size = chunk_size;
  p.state_v_first = state_v_first;

  // SPEC.md's shapes: [B, T, HV, K] per value head; dA's last extent is A's, so that a bad
  // chunk_size never sizes an allocation.
  const int64_t B = extent(q, 4, 0), T = extent(q, 4, 1), K = extent(q, 4, 3);
  const int64_t HV = extent(v, 4, 2), V = extent(v, 4, 3), BT = extent(A, 4, 3);
  const at::ScalarType f32 = at::kFloat, x = q.scalar_type();
  const std::array<OutputSpec<Problem>, 6> specs{{{{B, T, HV, K}, 4, f32, &Problem::dq},
                                                  {{B, T, HV, K}, 4, f32, &Problem::dk},
                                                  {{B, T, HV, V}, 4, x, &Problem::dv_out},
                                                  {{B, T, HV}, 3, f32, &Problem::db},
                                                  {{B, T, HV, K}, 4, f32, &Problem::dg},
                                                  {{B, T, HV, BT}, 4, f32, &Problem::dA}}};
  laps.lap(probe::inputs);
  const auto out = allocate_outputs(p, q, specs, kOp);
  laps.lap(probe::outputs);
  void* const stream = stream_for(backend, q.device());
  laps.lap(probe::stream);
  check(run(p, backend, stream, kernel), kOp);
  laps.lap(probe::run);
  return {out[0], out[1], out[2], out[3], out[4], out[5]};
}

// The Autograd kernel (not_differentiable.hpp): the op below autograd, then a raising backward
// node only where grad mode is on and an input requires grad.
Outputs chunk_kda_bwd_wy_dqkg_fused_autograd(
    c10::DispatchKeySet keys, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& v_new, const at::Tensor& g, const at::Tensor& beta, const at::Tensor& A,
    const at::Tensor& h, const at::Tensor& do_, const at::Tensor& dh, const at::Tensor& dv,
    std::optional<double> scale, const std::optional<at::Tensor>& cu_seqlens, int64_t chunk_size,
    const std::optional<at::Tensor>& chunk_indices, bool state_v_first,
    std::optional<std::string_view> backend_name, std::string_view kernel_name) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("kda_kernels::chunk_kda_bwd_wy_dqkg_fused", "")
                             .typed<decltype(chunk_kda_bwd_wy_dqkg_fused)>();
  Outputs out;
  {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    out = op.redispatch(keys & c10::after_autograd_keyset, q, k, v, v_new, g, beta, A, h, do_, dh,
                        dv, scale, cu_seqlens, chunk_size, chunk_indices, state_v_first,
                        backend_name, kernel_name);
  }
  mark_not_differentiable(kOp, {&q, &k, &v, &v_new, &g, &beta, &A, &h, &do_, &dh, &dv},
                          {&std::get<0>(out), &std::get<1>(out), &std::get<2>(out),
                           &std::get<3>(out), &std::get<4>(out), &std::get<5>(out)});
  return out;
}

}  // namespace

}  // namespace kda::torch_op

TORCH_LIBRARY_FRAGMENT(kda_kernels, m) {
  // The fake (meta) implementation, for torch.compile, is registered from Python there.
  m.set_python_module("kda_kernels._torch_op");
  m.def(
      "chunk_kda_bwd_wy_dqkg_fused(Tensor q, Tensor k, Tensor v, Tensor v_new, Tensor g, "
      "Tensor beta, Tensor A, Tensor h, Tensor do, Tensor dh, Tensor dv, float? scale=None, "
      "Tensor? cu_seqlens=None, SymInt chunk_size=64, Tensor? chunk_indices=None, "
      "bool state_v_first=False, str? backend=None, str cuda_kernel=\"auto\") "
      "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(kda_kernels, CPU, m) {
  m.impl("chunk_kda_bwd_wy_dqkg_fused", TORCH_FN(kda::torch_op::chunk_kda_bwd_wy_dqkg_fused));
}

TORCH_LIBRARY_IMPL(kda_kernels, CUDA, m) {
  m.impl("chunk_kda_bwd_wy_dqkg_fused", TORCH_FN(kda::torch_op::chunk_kda_bwd_wy_dqkg_fused));
}

// Not differentiable (it is itself a backward step): a call with inputs that require grad gives
// outputs whose backward raises, as the python op's does, instead of torch's default fallback,
// which only warns and lets gradients through it be silently wrong.
TORCH_LIBRARY_IMPL(kda_kernels, Autograd, m) {
  m.impl("chunk_kda_bwd_wy_dqkg_fused",
         TORCH_FN(kda::torch_op::chunk_kda_bwd_wy_dqkg_fused_autograd));
}
