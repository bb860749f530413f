// Explicit instantiations: X = __nv_bfloat16, every chunk size, TF32 and 3xTF32 products.
#include "ops/chunk_bwd_intra/cuda/intra_launch_template.cuh"

namespace kda::cuda::intra {

#define KDA_INTRA_INSTANTIATE(BT, SPLIT)                            \
  template Status launch_chunk_bwd_intra<__nv_bfloat16, BT, SPLIT>( \
      IntraParams, const IntraVariant&, int, cudaStream_t);
KDA_INTRA_INSTANTIATE(16, 1)
KDA_INTRA_INSTANTIATE(32, 1)
KDA_INTRA_INSTANTIATE(64, 1)
KDA_INTRA_INSTANTIATE(16, 3)
KDA_INTRA_INSTANTIATE(32, 3)
KDA_INTRA_INSTANTIATE(64, 3)
#undef KDA_INTRA_INSTANTIATE

}  // namespace kda::cuda::intra
