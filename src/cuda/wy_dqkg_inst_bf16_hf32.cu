// Explicit instantiations: X = __nv_bfloat16, h/dh = float, every chunk size.
#include "cuda/wy_dqkg_launch_template.cuh"

namespace kda::cuda {

template Status launch_wy_dqkg<__nv_bfloat16, float, 16>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg<__nv_bfloat16, float, 32>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg<__nv_bfloat16, float, 64>(const WyDqkgParams&, int, cudaStream_t);

}  // namespace kda::cuda
