// chunk_bwd_wy_dqkg's simt kernel: the dispatch of (X dtype, h dtype, chunk size) to one compiled
// kernel.

#include "cuda/common/dispatch.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/make_params.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/simt/dispatch.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/simt/launch.hpp"

namespace kda::detail {

Status launch_simt(const ChunkBwdWyDqkgProblem& p, const ChunkBwdWyDqkgDims& d,
                   cudaStream_t stream) {
  const cuda::WyDqkgParams params = cuda::make_wy_dqkg_params(p, d);
  const int device = p.q.device.index;
  return cuda::dispatch_x_dtype(d.x_dtype, [&](auto x) {
    using XT = typename decltype(x)::type;
    return cuda::dispatch_f32_or_x<XT>("h", d.h_dtype, d.x_dtype, [&](auto h) {
      using HT = typename decltype(h)::type;
      return cuda::dispatch_int<16, 32, 64>("chunk_size", d.BT, [&](auto bt) {
        return cuda::launch_wy_dqkg<XT, HT, decltype(bt)::value>(params, device, stream);
      });
    });
  });
}

}  // namespace kda::detail
