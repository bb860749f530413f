#pragma once
// What the WY tensor-core kernels' launchers share (host code, compiled by nvcc in the generated
// instantiation files): the launch of a kernel with one CTA per work unit. (dtype_tag, for the
// kernels' names in messages, comes with it.)

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/dtype_tag.cuh"
#include "cuda/common/kernel_attributes.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/params.hpp"

namespace kda::cuda {

// Launches `kernel_fn` with one CTA per unit, unit = blockIdx.x + blockIdx.y * gridDim.x (CTAs
// past the last unit return at once), after opting the kernel in to `smem_bytes` of dynamic
// shared memory on `device`. `name` is the kernel's name in messages.
template <typename KernelFn>
Status launch_one_cta_per_unit(KernelFn kernel_fn, const WyDqkgParams& params, int threads,
                               int smem_bytes, int device, cudaStream_t stream,
                               const std::string& name) {
  const void* kernel = reinterpret_cast<const void*>(kernel_fn);
  if (Status s = ensure_max_dynamic_smem(kernel, device, smem_bytes, name.c_str()); !s.ok()) {
    return s;
  }
  if (params.num_units <= 0) return Status::Ok();
  const int64_t max_x = std::numeric_limits<int32_t>::max();
  const int64_t grid_x = params.num_units < max_x ? params.num_units : max_x;
  const int64_t grid_y = (params.num_units + grid_x - 1) / grid_x;
  if (grid_y > 65535) {
    return {StatusCode::unsupported, name + ": " + std::to_string(params.num_units) +
                                         " work units exceed the grid's capacity"};
  }
  const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y));
  kernel_fn<<<grid, threads, smem_bytes, stream>>>(params);
  return launch_status(name);
}

}  // namespace kda::cuda
