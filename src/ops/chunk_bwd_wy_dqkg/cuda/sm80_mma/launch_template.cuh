#pragma once
// Definition of launch_wy_dqkg_mma; included only by the generated explicit-instantiation files.

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>

#include "ops/chunk_bwd_wy_dqkg/cuda/launch_units.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm80_mma/kernel.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm80_mma/launch.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm80_mma/traits.cuh"

namespace kda::cuda {

template <typename XT, typename HT, int kBT, int kV, bool kStateVFirst>
Status launch_wy_dqkg_mma(const WyDqkgParams& params, int device, cudaStream_t stream) {
  using Traits = WyDqkgMmaTraits<XT, HT, kBT, kV, kStateVFirst>;
  // For messages only; a function of the template arguments, so built once, not per launch.
  static const std::string name = std::string("wy_dqkg_mma_kernel<X=") + dtype_tag<XT>() +
                                  ", h=" + dtype_tag<HT>() + ", BT=" + std::to_string(kBT) +
                                  ", V=" + std::to_string(kV) +
                                  (kStateVFirst ? ", state_v_first>" : ">");
  return launch_one_cta_per_unit(&wy_dqkg_mma_kernel<Traits>, params, Traits::kThreads,
                                 Traits::kSmemBytes, device, stream, name);
}

template <typename XT, typename HT, int kV>
Status launch_wy_dqkg_mma_split(const WyDqkgParams& params, int ranks, int device,
                                cudaStream_t stream) {
  using Traits = WyDqkgMmaTraits<XT, HT, 64, kV, false, true>;
  static const std::string name = std::string("wy_dqkg_mma_kernel<X=") + dtype_tag<XT>() +
                                  ", h=" + dtype_tag<HT>() + ", BT=64, V=" + std::to_string(kV) +
                                  ", split units>";
  const auto kernel = &wy_dqkg_mma_kernel<Traits>;
  if (Status s = ensure_max_dynamic_smem(reinterpret_cast<const void*>(kernel), device,
                                         Traits::kSmemBytes, name.c_str());
      !s.ok()) {
    return s;
  }
  const int num_slabs = static_cast<int>(params.K / Traits::kSlabK);
  if (ranks < 2 || ranks > 4 || num_slabs % ranks != 0) {
    return {StatusCode::internal, name + ": " + std::to_string(ranks) +
                                      " CTAs per unit do not divide its " +
                                      std::to_string(num_slabs) + " slab pairs"};
  }
  if (params.num_units <= 0) return Status::Ok();
  if (params.num_units > std::numeric_limits<int32_t>::max() / ranks) {
    return {StatusCode::internal, name + ": too many units to split"};
  }
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = static_cast<unsigned>(ranks);
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(params.num_units * ranks));
  config.blockDim = dim3(Traits::kThreads);
  config.dynamicSmemBytes = Traits::kSmemBytes;
  config.stream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  if (Status s = cuda_status(cudaLaunchKernelEx(&config, kernel, params), name); !s.ok()) return s;
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
// The split-unit kernels for one (X dtype, h dtype), in files of their own (they compile in
// parallel with the others).
#define KDA_INSTANTIATE_WY_DQKG_MMA_SPLIT(XT, HT)                                      \
  template Status launch_wy_dqkg_mma_split<XT, HT, 64>(const WyDqkgParams&, int, int,  \
                                                       cudaStream_t);                  \
  template Status launch_wy_dqkg_mma_split<XT, HT, 128>(const WyDqkgParams&, int, int, \
                                                        cudaStream_t);
