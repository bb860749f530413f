// The CUDA backend's entry points: fills the kernel's parameter block from a validated problem,
// makes the tensors' device current (restoring the caller's afterwards) and dispatches on
// (X dtype, h dtype, chunk size) to one launch on the caller's stream.

#include <cuda_runtime.h>

#include <string>

#include "core/backends.hpp"
#include "cuda/cuda_status.hpp"
#include "cuda/wy_dqkg_launch.hpp"
#include "cuda/wy_dqkg_params.hpp"

namespace kda::detail {

namespace {

using cuda::WyDqkgParams;

cuda::TokenView token_view(const TensorView& t) {
  return {t.data, t.strides[0], t.strides[1], t.strides[2], t.strides[3]};
}

// h/dh as S[k][v]: for state_v_first the stored order is [.., V, K], so the strides swap.
cuda::StateView state_view(const TensorView& t, bool state_v_first) {
  const int64_t stride_k = state_v_first ? t.strides[4] : t.strides[3];
  const int64_t stride_v = state_v_first ? t.strides[3] : t.strides[4];
  return {t.data, t.strides[0], t.strides[1], t.strides[2], stride_k, stride_v};
}

cuda::IndexView index_view(const TensorView& t) {
  if (t.empty_arg()) return {};
  return {t.data, t.strides[0], t.rank > 1 ? t.strides[1] : 0, t.dtype == DType::i64};
}

WyDqkgParams make_params(const Problem& problem, const Dims& dims) {
  WyDqkgParams p;
  p.q = token_view(problem.q);
  p.k = token_view(problem.k);
  p.v = token_view(problem.v);
  p.v_new = token_view(problem.v_new);
  p.do_ = token_view(problem.do_);
  p.dv = token_view(problem.dv);
  p.g = token_view(problem.g);
  p.A = token_view(problem.A);
  p.beta = {problem.beta.data, problem.beta.strides[0], problem.beta.strides[1],
            problem.beta.strides[2], problem.beta.dtype == DType::f32};
  p.h = state_view(problem.h, problem.state_v_first);
  p.dh = state_view(problem.dh, problem.state_v_first);
  p.varlen = dims.varlen;
  p.has_chunk_indices = dims.varlen && !problem.chunk_indices.empty_arg();
  p.cu_seqlens = index_view(problem.cu_seqlens);
  p.chunk_indices = index_view(problem.chunk_indices);

  p.dq = static_cast<float*>(problem.dq.data);
  p.dk = static_cast<float*>(problem.dk.data);
  p.dg = static_cast<float*>(problem.dg.data);
  p.dv_out = problem.dv_out.data;
  p.db = static_cast<float*>(problem.db.data);
  p.dA = static_cast<float*>(problem.dA.data);

  p.B = dims.B;
  p.T = dims.T;
  p.H = dims.H;
  p.HV = dims.HV;
  p.K = dims.K;
  p.V = dims.V;
  p.NT = dims.NT;
  p.num_seqs = dims.num_seqs;
  p.heads_per_group = dims.HV / dims.H;
  p.num_units = (dims.varlen ? dims.NT : dims.B * dims.NT) * dims.HV;
  p.scale = static_cast<float>(problem.effective_scale());
  return p;
}

template <typename XT, typename HT>
Status dispatch_chunk_size(const WyDqkgParams& params, int64_t chunk_size, int device,
                           cudaStream_t stream) {
  switch (chunk_size) {
    case 16:
      return cuda::launch_wy_dqkg<XT, HT, 16>(params, device, stream);
    case 32:
      return cuda::launch_wy_dqkg<XT, HT, 32>(params, device, stream);
    case 64:
      return cuda::launch_wy_dqkg<XT, HT, 64>(params, device, stream);
    default:
      return {StatusCode::internal,
              "cuda: no kernel for chunk_size " + std::to_string(chunk_size) + " (16, 32, 64)"};
  }
}

template <typename XT>
Status dispatch_h_dtype(const WyDqkgParams& params, const Dims& dims, int device,
                        cudaStream_t stream) {
  if (dims.h_dtype == DType::f32) {
    return dispatch_chunk_size<XT, float>(params, dims.BT, device, stream);
  }
  if (dims.h_dtype == dims.x_dtype) {
    return dispatch_chunk_size<XT, XT>(params, dims.BT, device, stream);
  }
  return {StatusCode::internal, "cuda: no kernel for h dtype " +
                                    std::string(dtype_name(dims.h_dtype)) + " with X dtype " +
                                    std::string(dtype_name(dims.x_dtype))};
}

Status dispatch(const WyDqkgParams& params, const Dims& dims, int device, cudaStream_t stream) {
  switch (dims.x_dtype) {
    case DType::f16:
      return dispatch_h_dtype<__half>(params, dims, device, stream);
    case DType::bf16:
      return dispatch_h_dtype<__nv_bfloat16>(params, dims, device, stream);
    case DType::f32:
      return dispatch_h_dtype<float>(params, dims, device, stream);
    default:
      return {StatusCode::internal,
              "cuda: no kernel for X dtype " + std::string(dtype_name(dims.x_dtype))};
  }
}

}  // namespace

bool cuda_device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear our own error so a later launch check does not see it
    return false;
  }
  return count > 0;
}

Status run_cuda(const Problem& problem, const Dims& dims, void* stream) {
  if (dims.T == 0 || dims.B == 0 || dims.NT == 0) return Status::Ok();
  const WyDqkgParams params = make_params(problem, dims);
  const int device = problem.q.device.index;

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
  Status status = dispatch(params, dims, device, static_cast<cudaStream_t>(stream));
  if (caller_device != device) {
    Status restored = cuda::cuda_status(
        cudaSetDevice(caller_device),
        "cudaSetDevice(" + std::to_string(caller_device) + ") restoring the caller's device");
    if (status.ok()) status = restored;
  }
  return status;
}

}  // namespace kda::detail
