#pragma once
// Definition of launch_wy_dqkg_mma; included only by the generated explicit-instantiation files.

#include <cuda_runtime.h>

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
  return launch_units(&wy_dqkg_mma_kernel<Traits>, params, Traits::kThreads, Traits::kSmemBytes,
                      device, stream, name);
}

template <typename XT, typename HT, int kV>
Status launch_wy_dqkg_mma_split(const WyDqkgParams& params, int ranks, int device,
                                cudaStream_t stream) {
  using Traits = WyDqkgMmaTraits<XT, HT, 64, kV, false, true>;
  static_assert(Traits::kSlabK == kSplitSlabK,
                "wy_split_ranks divides the stages kSplitSlabK sets");
  static const std::string name = std::string("wy_dqkg_mma_kernel<X=") + dtype_tag<XT>() +
                                  ", h=" + dtype_tag<HT>() + ", BT=64, V=" + std::to_string(kV) +
                                  ", split units>";
  const int num_slabs = static_cast<int>(params.K / Traits::kSlabK);
  if (ranks < 2 || ranks > 4 || num_slabs % ranks != 0) {
    return {StatusCode::internal, name + ": " + std::to_string(ranks) +
                                      " CTAs per unit do not divide its " +
                                      std::to_string(num_slabs) + " slab pairs"};
  }
  return launch_units(&wy_dqkg_mma_kernel<Traits>, params, Traits::kThreads, Traits::kSmemBytes,
                      device, stream, name, ranks);
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
