// The CUDA backend of chunk_bwd_intra: makes the tensors' device current (restoring the caller's
// afterwards) and dispatches on (X dtype, chunk size, split) to one launch on the caller's stream.

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "cuda/cuda_status.hpp"
#include "ops/chunk_bwd_intra/backends.hpp"
#include "ops/chunk_bwd_intra/cuda/intra_launch.hpp"

namespace kda::detail {

namespace {

using cuda::intra::IntraParams;
using cuda::intra::IntraVariant;

template <typename XT, int kSplit>
Status dispatch_chunk_size(const IntraParams& params, const IntraVariant& variant, int64_t BT,
                           int device, cudaStream_t stream) {
  switch (BT) {
    case 16:
      return cuda::intra::launch_chunk_bwd_intra<XT, 16, kSplit>(params, variant, device, stream);
    case 32:
      return cuda::intra::launch_chunk_bwd_intra<XT, 32, kSplit>(params, variant, device, stream);
    case 64:
      return cuda::intra::launch_chunk_bwd_intra<XT, 64, kSplit>(params, variant, device, stream);
    default:
      return {StatusCode::internal, "cuda chunk_bwd_intra: no kernel for chunk_size " +
                                        std::to_string(BT) + " (16, 32, 64)"};
  }
}

template <typename XT>
Status dispatch_split(const IntraParams& params, const IntraVariant& variant, int64_t BT,
                      int device, cudaStream_t stream) {
  switch (variant.split) {
    case 0:
    case 1:
      return dispatch_chunk_size<XT, 1>(params, variant, BT, device, stream);
    case 3:
      return dispatch_chunk_size<XT, 3>(params, variant, BT, device, stream);
    default:
      return {StatusCode::internal,
              "cuda chunk_bwd_intra: no kernel for split " + std::to_string(variant.split)};
  }
}

Status dispatch(const IntraParams& params, const IntraVariant& variant,
                const ChunkBwdIntraDims& dims, int device, cudaStream_t stream) {
  switch (dims.x_dtype) {
    case DType::f16:
      return dispatch_split<__half>(params, variant, dims.BT, device, stream);
    case DType::bf16:
      return dispatch_split<__nv_bfloat16>(params, variant, dims.BT, device, stream);
    case DType::f32:  // 3xTF32 whatever the variant says: plain TF32 misses the float32 bar
      return dispatch_chunk_size<float, 3>(params, variant, dims.BT, device, stream);
    default:
      return {StatusCode::internal, "cuda chunk_bwd_intra: no kernel for X dtype " +
                                        std::string(dtype_name(dims.x_dtype))};
  }
}

// KDA_INTRA_VARIANT (IntraVariant::parse syntax) overrides the default variant, read once; a
// malformed value is ignored (the default runs).
const IntraVariant& library_variant() {
  static const IntraVariant variant = [] {
    IntraVariant v;
    if (const char* text = std::getenv("KDA_INTRA_VARIANT"); text != nullptr) {
      IntraVariant parsed;
      if (IntraVariant::parse(text, &parsed)) v = parsed;
    }
    return v;
  }();
  return variant;
}

}  // namespace

Status run_chunk_bwd_intra_cuda_variant(const ChunkBwdIntraProblem& problem,
                                        const ChunkBwdIntraDims& dims, void* stream,
                                        const IntraVariant& variant) {
  if (dims.T == 0 || dims.B == 0 || dims.NT == 0 || dims.HV == 0) return Status::Ok();
  const int device = problem.q.device.index;
  const IntraParams params = cuda::intra::make_intra_params(problem, dims);
  int caller_device = 0;
  if (Status s = cuda::cuda_status(cudaGetDevice(&caller_device), "cudaGetDevice"); !s.ok()) {
    return s;
  }
  if (caller_device != device) {
    if (Status s = cuda::cuda_status(cudaSetDevice(device),
                                     "cudaSetDevice(" + std::to_string(device) + ")");
        !s.ok()) {
      return s;
    }
  }
  Status status = dispatch(params, variant, dims, device, static_cast<cudaStream_t>(stream));
  if (caller_device != device) {
    Status restored = cuda::cuda_status(
        cudaSetDevice(caller_device),
        "cudaSetDevice(" + std::to_string(caller_device) + ") restoring the caller's device");
    if (status.ok()) status = restored;
  }
  return status;
}

Status run_chunk_bwd_intra_cuda(const ChunkBwdIntraProblem& problem, const ChunkBwdIntraDims& dims,
                                void* stream) {
  return run_chunk_bwd_intra_cuda_variant(problem, dims, stream, library_variant());
}

}  // namespace kda::detail
