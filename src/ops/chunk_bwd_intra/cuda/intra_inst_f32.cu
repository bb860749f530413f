// Explicit instantiations: X = float, every chunk size, 3xTF32 products only (plain TF32 cannot
// meet the float32 bar of 1e-5).
#include "ops/chunk_bwd_intra/cuda/intra_launch_template.cuh"

namespace kda::cuda::intra {

template Status launch_chunk_bwd_intra<float, 16, 3>(IntraParams, const IntraVariant&, int,
                                                     cudaStream_t);
template Status launch_chunk_bwd_intra<float, 32, 3>(IntraParams, const IntraVariant&, int,
                                                     cudaStream_t);
template Status launch_chunk_bwd_intra<float, 64, 3>(IntraParams, const IntraVariant&, int,
                                                     cudaStream_t);

}  // namespace kda::cuda::intra
