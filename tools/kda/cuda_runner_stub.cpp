// Builds without CUDA: the cuda backend path says so.

#include "cuda_runner.hpp"

namespace kda::cli {

Status cuda_ready() {
  return {StatusCode::backend_unavailable,
          "cuda backend not built: this kda was configured without CUDA (no nvcc, or "
          "KDA_ENABLE_CUDA=OFF); use --backend cpu"};
}

Status run_timed_cuda(const io::OpIo&, Kernel, io::HostProblem*, int, Timing*) {
  return cuda_ready();
}

}  // namespace kda::cli
