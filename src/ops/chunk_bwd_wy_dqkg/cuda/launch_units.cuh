#pragma once
// What the WY tensor-core kernels' launchers share (host code, compiled by nvcc in the generated
// instantiation files): the launch of a kernel over the work units, one CTA or one cluster per
// unit. (dtype_tag, for the kernels' names in messages, comes with it.)

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/dtype_tag.cuh"
#include "cuda/common/kernel_attributes.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/params.hpp"

namespace kda::cuda {

// Launches `kernel_fn` for every work unit after opting the kernel in to `smem_bytes` of dynamic
// shared memory on `device`; `name` is the kernel's name in messages.
//   ctas_per_unit = 1: one CTA per unit, unit = blockIdx.x + blockIdx.y * gridDim.x (CTAs past the
//   last unit return at once).
//   ctas_per_unit = n > 1: a cluster of n CTAs per unit (split units), unit = blockIdx.x / n, rank
//   blockIdx.x % n (a one-dimensional grid).
template <typename KernelFn>
Status launch_units(KernelFn kernel_fn, const WyDqkgParams& params, int threads, int smem_bytes,
                    int device, cudaStream_t stream, const std::string& name,
                    int ctas_per_unit = 1) {
  const void* kernel = reinterpret_cast<const void*>(kernel_fn);
  if (Status s = ensure_max_dynamic_smem(kernel, device, smem_bytes, name.c_str()); !s.ok()) {
    return s;
  }
  if (params.num_units <= 0) return Status::Ok();
  constexpr int64_t max_x = std::numeric_limits<int32_t>::max();
  if (ctas_per_unit > 1) {
    if (params.num_units > max_x / ctas_per_unit) {
      return {StatusCode::unsupported, name + ": " + std::to_string(params.num_units) +
                                           " work units exceed the split grid's capacity"};
    }
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = static_cast<unsigned>(ctas_per_unit);
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(params.num_units * ctas_per_unit));
    config.blockDim = dim3(static_cast<unsigned>(threads));
    config.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
    config.stream = stream;
    config.attrs = &cluster;
    config.numAttrs = 1;
    if (Status s = cuda_status(cudaLaunchKernelEx(&config, kernel_fn, params), name); !s.ok()) {
      return s;
    }
    return launch_status(name);
  }
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
