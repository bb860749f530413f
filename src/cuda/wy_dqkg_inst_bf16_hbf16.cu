// Explicit instantiations: X = __nv_bfloat16, h/dh = __nv_bfloat16, every chunk size.
#include "cuda/wy_dqkg_launch_template.cuh"

namespace kda::cuda {

template Status launch_wy_dqkg<__nv_bfloat16, __nv_bfloat16, 16>(const WyDqkgParams&, int,
                                                                 cudaStream_t);
template Status launch_wy_dqkg<__nv_bfloat16, __nv_bfloat16, 32>(const WyDqkgParams&, int,
                                                                 cudaStream_t);
template Status launch_wy_dqkg<__nv_bfloat16, __nv_bfloat16, 64>(const WyDqkgParams&, int,
                                                                 cudaStream_t);

}  // namespace kda::cuda
