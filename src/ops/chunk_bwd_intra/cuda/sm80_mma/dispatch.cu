// chunk_bwd_intra's sm80_mma kernel: a problem's runtime options (X, split, BT) to one compiled
// kernel through cuda/common/dispatch.hpp, and the launcher's cached occupancy query.

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/dispatch.hpp"
#include "ops/chunk_bwd_intra/cuda/make_params.hpp"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/dispatch.hpp"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/launch.hpp"

namespace kda::cuda::intra {

Status resident_ctas(const void* kernel, int device, int threads, int smem_bytes, int* out) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int>, int> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(kernel, device, smem_bytes);
  if (auto it = known.find(key); it != known.end()) {
    *out = it->second;
    return Status::Ok();
  }
  int n = 0;
  if (Status s = cuda_status(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem_bytes),
          "cudaOccupancyMaxActiveBlocksPerMultiprocessor(chunk_bwd_intra)");
      !s.ok()) {
    return s;
  }
  known[key] = n;
  *out = n;
  return Status::Ok();
}

}  // namespace kda::cuda::intra

namespace kda::detail {

Status launch_sm80_mma(const ChunkBwdIntraProblem& problem, const ChunkBwdIntraDims& dims,
                       const cuda::intra::IntraVariant& variant, int device, cudaStream_t stream) {
  const cuda::intra::IntraParams params = cuda::intra::make_intra_params(problem, dims, variant);
  return cuda::dispatch_x_dtype(dims.x_dtype, [&](auto x) {
    using XT = typename decltype(x)::type;
    // 3xTF32 unless split=1 is asked for (16-bit X only): float32 X misses its bar on plain
    // TF32, and 16-bit X on TF32 was less accurate than fla's kernel through a whole layer
    // (fla's own varlen float16 test failed on dt_bias's gradient; docs/performance.md).
    const int split = std::is_same_v<XT, float> || variant.split != 1 ? 3 : 1;
    return cuda::dispatch_int<1, 3>("split", split, [&](auto s) {
      if constexpr (std::is_same_v<XT, float> && decltype(s)::value == 1) {
        return Status{StatusCode::internal, "cuda chunk_bwd_intra: float32 X needs split 3"};
      } else {
        return cuda::dispatch_int<16, 32, 64>("chunk_size", dims.BT, [&](auto bt) {
          return cuda::intra::launch_chunk_bwd_intra<XT, decltype(bt)::value, decltype(s)::value>(
              params, variant, device, stream);
        });
      }
    });
  });
}

}  // namespace kda::detail
