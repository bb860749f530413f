// chunk_bwd_intra's CUDA backend: one kernel, sm80_mma (TF32 mma.sync for 16-bit X, 3xTF32 for
// float32 X), launched on the tensors' device and the caller's stream. kda::run takes the default
// IntraVariant{}; the benchmark and the tests pass others explicitly
// (run_chunk_bwd_intra_cuda_variant).

#include <cuda_runtime.h>

#include <string>

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
                                Kernel kernel, void* stream) {
  if (kernel == Kernel::simt) {
    return {StatusCode::unsupported,
            "kernel: chunk_bwd_intra has no simt kernel; its kernel is sm80_mma (or auto)"};
  }
  return run_chunk_bwd_intra_cuda_variant(problem, dims, stream, IntraVariant{});
}

}  // namespace kda::detail
