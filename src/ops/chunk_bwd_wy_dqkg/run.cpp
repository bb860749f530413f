// kda::run for chunk_bwd_wy_dqkg: validation once, then the backend (core/run_checks.hpp).

#include "core/run_checks.hpp"
#include "ops/chunk_bwd_wy_dqkg/backends.hpp"

namespace kda {

Status run(const ChunkBwdWyDqkgProblem& problem, Backend backend, void* stream, Kernel kernel) {
  static constexpr detail::OpBackends<ChunkBwdWyDqkgProblem, ChunkBwdWyDqkgDims> kBackends = {
    detail::run_chunk_bwd_wy_dqkg_cpu_ref,
    detail::run_chunk_bwd_wy_dqkg_cpu,
#if KDA_WITH_CUDA
    detail::run_chunk_bwd_wy_dqkg_cuda,
#else
    nullptr,
#endif
  };
  return detail::run_validated(problem, backend, stream, kernel, kBackends);
}

}  // namespace kda
