// chunk_bwd_epilogue's CUDA backend: its kernel is not written yet (docs/design.md, "The fused
// backward epilogue"). It refuses with KDA_STATUS_UNSUPPORTED, so that the fla backend's probe
// and every caller see that the operator has no CUDA kernel in this library.

#include "ops/chunk_bwd_epilogue/backends.hpp"

namespace kda::detail {

Status run_chunk_bwd_epilogue_cuda(const ChunkBwdEpilogueProblem&, const ChunkBwdEpilogueDims&,
                                   Kernel, void*) {
  return {StatusCode::unsupported,
          "backend: chunk_bwd_epilogue has no CUDA kernel yet; cpu-ref (float64) runs it on the "
          "CPU"};
}

}  // namespace kda::detail
