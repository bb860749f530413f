// Explicit instantiations of the mma kernel for X = __nv_bfloat16, h/dh = float (the set is
// KDA_INSTANTIATE_WY_DQKG_MMA's, in wy_dqkg_mma_launch_template.cuh).
#include "cuda/fast/wy_dqkg_mma_launch_template.cuh"

namespace kda::cuda {

KDA_INSTANTIATE_WY_DQKG_MMA(__nv_bfloat16, float)

}  // namespace kda::cuda
