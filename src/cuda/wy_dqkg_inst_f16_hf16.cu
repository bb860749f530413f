// Explicit instantiations: X = __half, h/dh = __half, every chunk size.
#include "cuda/wy_dqkg_launch_template.cuh"

namespace kda::cuda {

template Status launch_wy_dqkg<__half, __half, 16>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg<__half, __half, 32>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg<__half, __half, 64>(const WyDqkgParams&, int, cudaStream_t);

}  // namespace kda::cuda
