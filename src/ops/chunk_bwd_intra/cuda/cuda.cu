// chunk_bwd_intra's CUDA backend: one kernel, sm80_mma (TF32 mma.sync for 16-bit X, 3xTF32 for
// float32 X), launched on the tensors' device and the caller's stream. Its variant (the
// benchmark's switches) is IntraVariant{} unless the environment variable KDA_INTRA_VARIANT names
// another; a malformed value is an error naming the variable.

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "core/run_checks.hpp"
#include "cuda/common/devices.hpp"
#include "cuda/common/dispatch.hpp"
#include "ops/chunk_bwd_intra/backends.hpp"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/launch.hpp"

namespace kda::detail {

namespace {

using cuda::intra::IntraParams;
using cuda::intra::IntraVariant;

Status launch(const IntraParams& params, const IntraVariant& variant, const ChunkBwdIntraDims& dims,
              int device, cudaStream_t stream) {
  return cuda::dispatch_x_dtype(dims.x_dtype, [&](auto x) {
    using XT = typename decltype(x)::type;
    // float32 X always takes 3xTF32: plain TF32 misses its bar.
    const int split = std::is_same_v<XT, float> || variant.split == 3 ? 3 : 1;
    return cuda::dispatch_int<1, 3>("split", split, [&](auto s) {
      if constexpr (std::is_same_v<XT, float> && decltype(s)::value == 1) {
        return Status{StatusCode::internal, "cuda chunk_bwd_intra: float32 X needs split 3"};
      } else {
        return cuda::dispatch_int<16, 32, 64>("chunk_size", dims.BT, [&](auto bt) {
          return cuda::intra::launch_chunk_bwd_intra<XT, decltype(bt)::value, decltype(s)::value>(
              params, variant, device, stream);
        });
      }
    });
  });
}

Status environment_variant(IntraVariant* out) {
  *out = IntraVariant{};
  const char* text = std::getenv("KDA_INTRA_VARIANT");
  if (text == nullptr || *text == '\0') return Status::Ok();
  if (!IntraVariant::parse(text, out)) {
    return invalid_argument(
        std::string("environment variable KDA_INTRA_VARIANT: expected "
                    "split=1|3,stages=0|1|2,prefetch=0|1,fast=0|1,tma=0|1,diag=0|1 (any subset), "
                    "got '") +
        text + "'");
  }
  return Status::Ok();
}

}  // namespace

Status run_chunk_bwd_intra_cuda_variant(const ChunkBwdIntraProblem& problem,
                                        const ChunkBwdIntraDims& dims, void* stream,
                                        const IntraVariant& variant) {
  const int device = problem.q.device.index;
  return cuda::run_on_device(device, stream, [&] {
    if (dims.T == 0 || dims.B == 0 || dims.NT == 0 || dims.HV == 0) return Status::Ok();
    const IntraParams params = cuda::intra::make_intra_params(problem, dims, variant);
    return launch(params, variant, dims, device, static_cast<cudaStream_t>(stream));
  });
}

Status run_chunk_bwd_intra_cuda(const ChunkBwdIntraProblem& problem, const ChunkBwdIntraDims& dims,
                                Kernel requested, void* stream) {
  Kernel kernel = Kernel::auto_;
  if (Status s = effective_kernel(requested, &kernel); !s.ok()) return s;
  if (kernel == Kernel::simt) {
    return {StatusCode::unsupported,
            "kernel: chunk_bwd_intra has no simt kernel; its kernel is sm80_mma (or auto)"};
  }
  IntraVariant variant;
  if (Status s = environment_variant(&variant); !s.ok()) return s;
  return run_chunk_bwd_intra_cuda_variant(problem, dims, stream, variant);
}

}  // namespace kda::detail
