// chunk_bwd_intra's CUDA backend: one kernel, sm80_mma (TF32 mma.sync for 16-bit X, 3xTF32 for
// float32 X), launched on the tensors' device and the caller's stream. kda::run takes the default
// IntraVariant{}; the benchmark and the tests pass others explicitly
// (run_chunk_bwd_intra_cuda_variant).

#include <cuda_runtime.h>

#include <sstream>
#include <string>

#include "cuda/common/devices.hpp"
#include "ops/chunk_bwd_intra/backends.hpp"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/dispatch.hpp"
#include "ops/chunk_bwd_intra/cuda/variant.hpp"

namespace kda::cuda::intra {

bool IntraVariant::parse(const std::string& text, IntraVariant* out) {
  IntraVariant v;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return false;
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    if (key == "split" && (value == "0" || value == "1" || value == "3")) {
      v.split = std::stoi(value);
    } else if (key == "stages" && (value == "0" || value == "1" || value == "2")) {
      v.stages = std::stoi(value);
    } else if (key == "prefetch" && (value == "0" || value == "1")) {
      v.l2_prefetch = value == "1";
    } else if (key == "fast" && (value == "0" || value == "1")) {
      v.fast_paths = value == "1";
    } else if (key == "tma" && (value == "0" || value == "1")) {
      v.tma = std::stoi(value);
    } else if (key == "diag" && (value == "0" || value == "1")) {
      v.diag = std::stoi(value);
    } else if (key == "grid" && (value == "0" || value == "1")) {
      v.grid = std::stoi(value);
    } else {
      return false;
    }
  }
  *out = v;
  return true;
}

std::string IntraVariant::describe() const {
  return "split=" + std::to_string(split) + ",stages=" + std::to_string(stages) +
         ",prefetch=" + std::to_string(l2_prefetch ? 1 : 0) +
         ",fast=" + std::to_string(fast_paths ? 1 : 0) + ",tma=" + std::to_string(tma) +
         ",diag=" + std::to_string(diag) + ",grid=" + std::to_string(grid);
}

}  // namespace kda::cuda::intra

namespace kda::detail {

Status run_chunk_bwd_intra_cuda_variant(const ChunkBwdIntraProblem& problem,
                                        const ChunkBwdIntraDims& dims, void* stream,
                                        const cuda::intra::IntraVariant& variant) {
  const int device = problem.q.device.index;
  return cuda::run_on_device(device, stream, [&] {
    if (dims.T == 0 || dims.B == 0 || dims.NT == 0 || dims.HV == 0) return Status::Ok();
    return launch_sm80_mma(problem, dims, variant, device, static_cast<cudaStream_t>(stream));
  });
}

Status run_chunk_bwd_intra_cuda(const ChunkBwdIntraProblem& problem, const ChunkBwdIntraDims& dims,
                                Kernel kernel, void* stream) {
  if (kernel == Kernel::simt) {
    return {StatusCode::unsupported,
            "kernel: chunk_bwd_intra has no simt kernel; its kernel is sm80_mma (or auto)"};
  }
  return run_chunk_bwd_intra_cuda_variant(problem, dims, stream, cuda::intra::IntraVariant{});
}

}  // namespace kda::detail
