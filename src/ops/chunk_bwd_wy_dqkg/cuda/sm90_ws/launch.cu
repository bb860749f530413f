// The sm90_ws kernel's launcher and its four instantiations (X in float16, bfloat16; h in
// float32 or X).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/dtype_tag.cuh"
#include "cuda/common/kernel_attributes.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm90_ws/kernel.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm90_ws/launch.hpp"

namespace kda::cuda {

template <typename XT, typename HT>
Status launch_wy_dqkg_ws(const WyDqkgParams& params, const WyDqkgMaps& maps, int device,
                         cudaStream_t stream) {
  static const std::string name =
      std::string("wy_dqkg_ws_kernel<X=") + dtype_tag<XT>() + ", h=" + dtype_tag<HT>() + ">";
  const void* kernel = reinterpret_cast<const void*>(&wy_dqkg_ws_kernel<XT, HT>);
  if (Status s = ensure_max_dynamic_smem(kernel, device, ws::kSmemBytes, name.c_str()); !s.ok()) {
    return s;
  }
  if (params.num_units <= 0) return Status::Ok();
  DeviceFacts facts;
  if (Status s = device_facts(device, &facts); !s.ok()) return s;
  const int64_t ctas = params.num_units < facts.sms ? params.num_units : facts.sms;
  wy_dqkg_ws_kernel<XT, HT>
      <<<static_cast<unsigned>(ctas), ws::kThreads, ws::kSmemBytes, stream>>>(params, maps);
  return launch_status(name);
}

template Status launch_wy_dqkg_ws<__nv_bfloat16, float>(const WyDqkgParams&, const WyDqkgMaps&, int,
                                                        cudaStream_t);
template Status launch_wy_dqkg_ws<__nv_bfloat16, __nv_bfloat16>(const WyDqkgParams&,
                                                                const WyDqkgMaps&, int,
                                                                cudaStream_t);
template Status launch_wy_dqkg_ws<__half, float>(const WyDqkgParams&, const WyDqkgMaps&, int,
                                                 cudaStream_t);
template Status launch_wy_dqkg_ws<__half, __half>(const WyDqkgParams&, const WyDqkgMaps&, int,
                                                  cudaStream_t);

}  // namespace kda::cuda
