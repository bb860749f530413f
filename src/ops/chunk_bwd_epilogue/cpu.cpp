// chunk_bwd_epilogue's cpu backend: not written yet. It refuses, naming the backend that runs the
// operator on the CPU today (cpu-ref, float64), rather than returning anything that looks valid.

#include "ops/chunk_bwd_epilogue/backends.hpp"

namespace kda::detail {

Status run_chunk_bwd_epilogue_cpu(const ChunkBwdEpilogueProblem&, const ChunkBwdEpilogueDims&) {
  return {StatusCode::unsupported,
          "backend: chunk_bwd_epilogue has no float32 cpu backend yet; cpu-ref (float64) runs it "
          "on the CPU"};
}

}  // namespace kda::detail
