// chunk_bwd_wy_dqkg's CUDA backend: picks the kernel (the caller's choice, else sm80_mma where it
// takes the problem and simt elsewhere) and launches it on the tensors' device and the caller's
// stream.

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/devices.hpp"
#include "ops/chunk_bwd_wy_dqkg/backends.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/simt/dispatch.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm80_mma/dispatch.hpp"

namespace kda::detail {

Status run_chunk_bwd_wy_dqkg_cuda(const ChunkBwdWyDqkgProblem& problem,
                                  const ChunkBwdWyDqkgDims& dims, Kernel kernel, void* stream) {
  return run_chunk_bwd_wy_dqkg_cuda_tuned(problem, dims, kernel, stream, WyCudaTuning{});
}

Status run_chunk_bwd_wy_dqkg_cuda_tuned(const ChunkBwdWyDqkgProblem& problem,
                                        const ChunkBwdWyDqkgDims& dims, Kernel kernel, void* stream,
                                        const WyCudaTuning& tuning) {
  if (tuning.split_ranks != 0 && tuning.split_ranks != 1 && tuning.split_ranks != 2 &&
      tuning.split_ranks != 4) {
    return invalid_argument("tuning split_ranks: expected 0 (the size rule), 1, 2 or 4, got " +
                            std::to_string(tuning.split_ranks));
  }
  // The reason sm80_mma refuses a problem is worded only when it was asked for by name.
  std::string why_not;
  const bool mma_takes_it =
      sm80_mma_supports(problem, dims, kernel == Kernel::sm80_mma ? &why_not : nullptr);
  if (kernel == Kernel::sm80_mma && !mma_takes_it) {
    return {StatusCode::unsupported,
            "kernel: sm80_mma cannot take this problem: " + why_not + "; simt (or auto) can"};
  }
  const bool use_mma = kernel == Kernel::sm80_mma || (kernel == Kernel::auto_ && mma_takes_it);
  return cuda::run_on_device(problem.q.device.index, stream, [&] {
    if (dims.T == 0 || dims.B == 0 || dims.NT == 0) return Status::Ok();
    const auto cuda_stream = static_cast<cudaStream_t>(stream);
    return use_mma ? launch_sm80_mma(problem, dims, cuda_stream, tuning.split_ranks)
                   : launch_simt(problem, dims, cuda_stream);
  });
}

}  // namespace kda::detail
