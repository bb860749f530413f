// Explicit instantiations of the mma kernel: X = __nv_bfloat16, h/dh = float; every (BT, V,
// layout), and the L2-prefetch variants of the k-first layout.
#include "cuda/fast/wy_dqkg_mma_launch_template.cuh"

namespace kda::cuda {

// clang-format off
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 16, 64, false>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 16, 64, true>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 16, 128, false>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 16, 128, true>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 32, 64, false>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 32, 64, true>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 32, 128, false>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 32, 128, true>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 64, 64, false>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 64, 64, true>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 64, 128, false>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 64, 128, true>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 16, 64, false, true>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 16, 128, false, true>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 32, 64, false, true>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 32, 128, false, true>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 64, 64, false, true>(const WyDqkgParams&, int, cudaStream_t);
template Status launch_wy_dqkg_mma<__nv_bfloat16, float, 64, 128, false, true>(const WyDqkgParams&, int, cudaStream_t);
// clang-format on

}  // namespace kda::cuda
