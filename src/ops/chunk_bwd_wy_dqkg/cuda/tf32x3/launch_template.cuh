#pragma once
// Definition of launch_wy_dqkg_tf32x3; included only by the generated explicit-instantiation
// files.

#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "ops/chunk_bwd_wy_dqkg/cuda/launch_units.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/tf32x3/kernel.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/tf32x3/launch.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/tf32x3/traits.cuh"

namespace kda::cuda {

template <int kBT, int kV, bool kStateVFirst>
Status launch_wy_dqkg_tf32x3(const WyDqkgParams& params, int device, cudaStream_t stream) {
  using Traits = WyDqkgTf32x3Traits<kBT, kV, kStateVFirst>;
  // For messages only; a function of the template arguments, so built once, not per launch.
  static const std::string name = std::string("wy_dqkg_tf32x3_kernel<X=f32, BT=") +
                                  std::to_string(kBT) + ", V=" + std::to_string(kV) +
                                  (kStateVFirst ? ", state_v_first>" : ">");
  return launch_units(&wy_dqkg_tf32x3_kernel<Traits>, params, Traits::kThreads, Traits::kSmemBytes,
                      device, stream, name);
}

}  // namespace kda::cuda

// The explicit instantiations for one (BT, V), both state layouts. CMake generates one file per
// (BT, V) from the list in src/ops/chunk_bwd_wy_dqkg/CMakeLists.txt (passing X = float, which
// only the float32 build of the list gets), so that the six compile in parallel.
#define KDA_INSTANTIATE_WY_DQKG_TF32X3_BT_V(XT, BT, V)                                         \
  static_assert(std::is_same_v<XT, float>, "the tf32x3 kernel takes float32 X");               \
  template Status launch_wy_dqkg_tf32x3<BT, V, false>(const WyDqkgParams&, int, cudaStream_t); \
  template Status launch_wy_dqkg_tf32x3<BT, V, true>(const WyDqkgParams&, int, cudaStream_t);
#define KDA_INSTANTIATE_WY_DQKG_TF32X3_BT16_V64(XT) KDA_INSTANTIATE_WY_DQKG_TF32X3_BT_V(XT, 16, 64)
#define KDA_INSTANTIATE_WY_DQKG_TF32X3_BT16_V128(XT) \
  KDA_INSTANTIATE_WY_DQKG_TF32X3_BT_V(XT, 16, 128)
#define KDA_INSTANTIATE_WY_DQKG_TF32X3_BT32_V64(XT) KDA_INSTANTIATE_WY_DQKG_TF32X3_BT_V(XT, 32, 64)
#define KDA_INSTANTIATE_WY_DQKG_TF32X3_BT32_V128(XT) \
  KDA_INSTANTIATE_WY_DQKG_TF32X3_BT_V(XT, 32, 128)
#define KDA_INSTANTIATE_WY_DQKG_TF32X3_BT64_V64(XT) KDA_INSTANTIATE_WY_DQKG_TF32X3_BT_V(XT, 64, 64)
#define KDA_INSTANTIATE_WY_DQKG_TF32X3_BT64_V128(XT) \
  KDA_INSTANTIATE_WY_DQKG_TF32X3_BT_V(XT, 64, 128)
