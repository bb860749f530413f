#pragma once
// Definition of launch_wy_dqkg_mma; included only by the generated explicit-instantiation files.

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/kernel_attributes.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm80_mma/kernel.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm80_mma/launch.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm80_mma/traits.cuh"

namespace kda::cuda {

template <typename T>
constexpr const char* mma_dtype_name() {
  if constexpr (std::is_same_v<T, float>) {
    return "f32";
  } else if constexpr (std::is_same_v<T, __half>) {
    return "f16";
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "dtypes are float, __half or __nv_bfloat16");
    return "bf16";
  }
}

template <typename XT, typename HT, int kBT, int kV, bool kStateVFirst>
Status launch_wy_dqkg_mma(const WyDqkgParams& params, int device, cudaStream_t stream) {
  using Traits = WyDqkgMmaTraits<XT, HT, kBT, kV, kStateVFirst>;
  const auto kernel_fn = &wy_dqkg_mma_kernel<Traits>;
  // For messages only; a function of the template arguments, so built once, not per launch.
  static const std::string name = std::string("wy_dqkg_mma_kernel<X=") + mma_dtype_name<XT>() +
                                  ", h=" + mma_dtype_name<HT>() + ", BT=" + std::to_string(kBT) +
                                  ", V=" + std::to_string(kV) +
                                  (kStateVFirst ? ", state_v_first>" : ">");
  const void* kernel = reinterpret_cast<const void*>(kernel_fn);
  if (Status s = ensure_max_dynamic_smem(kernel, device, Traits::kSmemBytes, name.c_str());
      !s.ok()) {
    return s;
  }
  if (params.num_units <= 0) return Status::Ok();
  // One CTA per unit, unit = blockIdx.x + blockIdx.y * gridDim.x (CTAs past the last unit
  // return at once).
  const int64_t max_x = std::numeric_limits<int32_t>::max();
  const int64_t grid_x = params.num_units < max_x ? params.num_units : max_x;
  const int64_t grid_y = (params.num_units + grid_x - 1) / grid_x;
  if (grid_y > 65535) {
    return {StatusCode::unsupported, name + ": " + std::to_string(params.num_units) +
                                         " work units exceed the grid's capacity"};
  }
  const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y));
  kernel_fn<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(params);
  return launch_status(name);
}

}  // namespace kda::cuda

// The explicit instantiations for one (X dtype, h dtype) pair: every (BT, V) in both layouts, the
// set dispatch.cu dispatches to. CMake generates one file per pair from the list in
// src/ops/chunk_bwd_wy_dqkg/CMakeLists.txt, so that the pairs compile in parallel.
#define KDA_INSTANTIATE_WY_DQKG_MMA_BT_V(XT, HT, BT, V)                              \
  template Status launch_wy_dqkg_mma<XT, HT, BT, V, false>(const WyDqkgParams&, int, \
                                                           cudaStream_t);            \
  template Status launch_wy_dqkg_mma<XT, HT, BT, V, true>(const WyDqkgParams&, int, cudaStream_t);
#define KDA_INSTANTIATE_WY_DQKG_MMA(XT, HT)         \
  KDA_INSTANTIATE_WY_DQKG_MMA_BT_V(XT, HT, 16, 64)  \
  KDA_INSTANTIATE_WY_DQKG_MMA_BT_V(XT, HT, 16, 128) \
  KDA_INSTANTIATE_WY_DQKG_MMA_BT_V(XT, HT, 32, 64)  \
  KDA_INSTANTIATE_WY_DQKG_MMA_BT_V(XT, HT, 32, 128) \
  KDA_INSTANTIATE_WY_DQKG_MMA_BT_V(XT, HT, 64, 64)  \
  KDA_INSTANTIATE_WY_DQKG_MMA_BT_V(XT, HT, 64, 128)
