// chunk_bwd_intra's CUDA backend. The kernel is being written (docs/status.md); until it lands
// the backend refuses every call with a message that says so, rather than returning nothing.

#include "ops/chunk_bwd_intra/backends.hpp"

namespace kda::detail {

Status run_chunk_bwd_intra_cuda(const ChunkBwdIntraProblem&, const ChunkBwdIntraDims&, Kernel,
                                void*) {
  return {StatusCode::unsupported,
          "chunk_bwd_intra: this build of libkda has no CUDA kernel for it yet (use backend cpu)"};
}

}  // namespace kda::detail
