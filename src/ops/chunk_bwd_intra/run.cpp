// kda::run for chunk_bwd_intra: validation once, then the backend (core/run_checks.hpp).

#include "core/run_checks.hpp"
#include "ops/chunk_bwd_intra/backends.hpp"

namespace kda {

Status run(const ChunkBwdIntraProblem& problem, Backend backend, void* stream, Kernel kernel) {
  static constexpr detail::OpBackends<ChunkBwdIntraProblem, ChunkBwdIntraDims> kBackends = {
    detail::run_chunk_bwd_intra_cpu_ref,
    detail::run_chunk_bwd_intra_cpu,
#if KDA_WITH_CUDA
    detail::run_chunk_bwd_intra_cuda,
#else
    nullptr,
#endif
  };
  return detail::run_validated(problem, backend, stream, kernel, kBackends);
}

}  // namespace kda
