// Explicit instantiations: X = float, h/dh = float, every chunk size.
#include "cuda/wy_dqkg_launch_template.cuh"

namespace kda::cuda {

template Status launch_wy_dqkg<float, float, 16>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg<float, float, 32>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg<float, float, 64>(const WyDqkgParams&, int, cudaStream_t);

}  // namespace kda::cuda
