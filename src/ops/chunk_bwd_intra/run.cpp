// kda::run for chunk_bwd_intra: validation once, then the backend.

#include "core/run_checks.hpp"
#include "ops/chunk_bwd_intra/backends.hpp"

namespace kda {

Status run(const ChunkBwdIntraProblem& problem, Backend backend, void* stream, Kernel kernel) {
  ChunkBwdIntraDims dims;
  if (Status s = problem.validate(&dims); !s.ok()) return s;
  if (Status s = detail::check_backend_call(backend, kernel, problem.q); !s.ok()) return s;
  switch (backend) {
    case Backend::cpu_ref:
      return detail::run_chunk_bwd_intra_cpu_ref(problem, dims);
    case Backend::cpu:
      return detail::run_chunk_bwd_intra_cpu(problem, dims);
    case Backend::cuda:
#if KDA_WITH_CUDA
      return detail::run_chunk_bwd_intra_cuda(problem, dims, kernel, stream);
#else
      break;  // check_backend_call refused it
#endif
  }
  (void)stream;
  return {StatusCode::internal, "run: no backend took the call"};
}

}  // namespace kda
