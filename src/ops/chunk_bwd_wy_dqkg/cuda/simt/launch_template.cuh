#pragma once
// Definition of launch_wy_dqkg; included only by the generated explicit-instantiation files.

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/kernel_attributes.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/launch_units.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/simt/kernel.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/simt/launch.hpp"

namespace kda::cuda {

template <typename XT, typename HT, int kBT>
Status launch_wy_dqkg(const WyDqkgParams& params, int device, cudaStream_t stream) {
  using Traits = WyDqkgTraits<kBT>;
  // For messages only; a function of the template arguments, so built once, not per launch.
  static const std::string name = std::string("wy_dqkg_kernel<X=") + dtype_tag<XT>() +
                                  ", h=" + dtype_tag<HT>() + ", BT=" + std::to_string(kBT) + ">";
  const void* kernel = reinterpret_cast<const void*>(&wy_dqkg_kernel<XT, HT, kBT>);
  if (Status s = ensure_max_dynamic_smem(kernel, device, Traits::kSmemBytes, name.c_str());
      !s.ok()) {
    return s;
  }
  // One CTA per unit; past 2^31 - 1 units the kernel's unit loop strides over the rest.
  const int64_t max_grid = std::numeric_limits<int32_t>::max();
  const unsigned grid =
      static_cast<unsigned>(params.num_units < max_grid ? params.num_units : max_grid);
  wy_dqkg_kernel<XT, HT, kBT><<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(params);
  return launch_status(name);
}

}  // namespace kda::cuda

// The explicit instantiations for one (X dtype, h dtype) pair: every chunk size. CMake generates
// one file per pair from the list in src/ops/chunk_bwd_wy_dqkg/CMakeLists.txt, so that the pairs
// compile in parallel.
#define KDA_INSTANTIATE_WY_DQKG_SIMT(XT, HT)                                          \
  template Status launch_wy_dqkg<XT, HT, 16>(const WyDqkgParams&, int, cudaStream_t); \
  template Status launch_wy_dqkg<XT, HT, 32>(const WyDqkgParams&, int, cudaStream_t); \
  template Status launch_wy_dqkg<XT, HT, 64>(const WyDqkgParams&, int, cudaStream_t);
