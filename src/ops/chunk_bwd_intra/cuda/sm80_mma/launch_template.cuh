#pragma once
// Definition of launch_chunk_bwd_intra; included only by the generated explicit-instantiation
// files.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/dtype_tag.cuh"
#include "cuda/common/kernel_attributes.hpp"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/kernel.cuh"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/launch.hpp"

namespace kda::cuda::intra {

// Launches the kernel of traits Tr (params.smem filled): a persistent grid of as many CTAs as
// fit at once (or, `balanced_grid`, the fewest that need as many rounds), each looping over units.
template <typename Tr>
Status launch_intra_kernel(const IntraParams& params, const DeviceFacts& facts, int device,
                           cudaStream_t stream, bool balanced_grid) {
  // Worded once per instantiation (no string built per call).
  static const std::string name =
      std::string("chunk_bwd_intra_kernel<X=") + dtype_tag<typename Tr::XT>() +
      ", BT=" + std::to_string(Tr::kBT) + ", split=" + std::to_string(Tr::kSplit) +
      (Tr::kBulk ? ", bulk copies, stages=" + std::to_string(Tr::kBulkStages)
                 : std::string(", cp.async")) +
      (Tr::kDiagTc ? ", tensor-core diagonal>" : ">");
  if (params.smem.total_bytes > facts.max_smem) {
    return {StatusCode::unsupported, name + ": needs " + std::to_string(params.smem.total_bytes) +
                                         " bytes of shared memory, the device allows " +
                                         std::to_string(facts.max_smem)};
  }
  const void* kernel = reinterpret_cast<const void*>(&chunk_bwd_intra_kernel<Tr>);
  if (Status s = ensure_max_dynamic_smem(kernel, device, params.smem.total_bytes, name.c_str());
      !s.ok()) {
    return s;
  }
  int per_sm = 0;
  if (Status s = resident_ctas(kernel, device, Tr::kThreads, params.smem.total_bytes, &per_sm);
      !s.ok()) {
    return s;
  }
  const int64_t slots = static_cast<int64_t>(std::max(per_sm, 1)) * facts.sms;
  int64_t ctas = std::min(params.num_units, slots);
  if (balanced_grid && ctas > 0) {
    const int64_t rounds = (params.num_units + ctas - 1) / ctas;
    ctas = (params.num_units + rounds - 1) / rounds;
  }
  const auto grid = static_cast<unsigned>(ctas);
  chunk_bwd_intra_kernel<Tr><<<grid, Tr::kThreads, params.smem.total_bytes, stream>>>(params);
  return launch_status(name);
}

template <typename XT, int kBT, int kSplit>
Status launch_chunk_bwd_intra(IntraParams params, const IntraVariant& variant, int device,
                              cudaStream_t stream) {
  // The copy paths have the same warps (the shared-memory map depends on them only).
  using Async = IntraTraits<XT, kBT, kSplit, 0>;
  using Bulk1 = IntraTraits<XT, kBT, kSplit, 1>;
  using Bulk2 = IntraTraits<XT, kBT, kSplit, 2>;
  static_assert(Bulk1::kWarps == Async::kWarps && Bulk2::kWarps == Async::kWarps,
                "one shared-memory map for every copy path");
  DeviceFacts facts;
  if (Status s = device_facts(device, &facts); !s.ok()) return s;
  params.smem = make_intra_smem_layout(kBT, params.K, static_cast<int>(sizeof(XT)), Async::kWarps,
                                       variant.stages, facts.max_smem);
  params.l2_prefetch = variant.l2_prefetch;
  params.fast_copies = params.fast_copies && variant.fast_paths;
  params.fast_prefetch = params.fast_prefetch && variant.fast_paths;
  const bool balanced = variant.grid == 1;
  if (!params.tma_copies) {
    return launch_intra_kernel<Async>(params, facts, device, stream, balanced);
  }
  if constexpr (kSplit == 1) {
    if (params.diag_tc) {
      using Bulk1Tc = IntraTraits<XT, kBT, kSplit, 1, true>;
      using Bulk2Tc = IntraTraits<XT, kBT, kSplit, 2, true>;
      return params.smem.stages == 2
                 ? launch_intra_kernel<Bulk2Tc>(params, facts, device, stream, balanced)
                 : launch_intra_kernel<Bulk1Tc>(params, facts, device, stream, balanced);
    }
  }
  return params.smem.stages == 2
             ? launch_intra_kernel<Bulk2>(params, facts, device, stream, balanced)
             : launch_intra_kernel<Bulk1>(params, facts, device, stream, balanced);
}

}  // namespace kda::cuda::intra

// The explicit instantiations for one X dtype: every chunk size, with TF32 (split 1) and 3xTF32
// (split 3) products for 16-bit X, 3xTF32 only for float32 (TF32 misses its bar). CMake generates
// one file per X dtype from the list in src/ops/chunk_bwd_intra/CMakeLists.txt.
#define KDA_INSTANTIATE_INTRA_SM80_MMA_SPLIT(XT, SPLIT)                   \
  template Status intra::launch_chunk_bwd_intra<XT, 16, SPLIT>(           \
      intra::IntraParams, const intra::IntraVariant&, int, cudaStream_t); \
  template Status intra::launch_chunk_bwd_intra<XT, 32, SPLIT>(           \
      intra::IntraParams, const intra::IntraVariant&, int, cudaStream_t); \
  template Status intra::launch_chunk_bwd_intra<XT, 64, SPLIT>(           \
      intra::IntraParams, const intra::IntraVariant&, int, cudaStream_t);
#define KDA_INSTANTIATE_INTRA_SM80_MMA_X16(XT) \
  KDA_INSTANTIATE_INTRA_SM80_MMA_SPLIT(XT, 1) KDA_INSTANTIATE_INTRA_SM80_MMA_SPLIT(XT, 3)
#define KDA_INSTANTIATE_INTRA_SM80_MMA_F32(XT) KDA_INSTANTIATE_INTRA_SM80_MMA_SPLIT(XT, 3)
