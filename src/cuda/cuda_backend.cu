// The CUDA backend's entry points: fills the kernel's parameter block from a validated problem,
// makes the tensors' device current (restoring the caller's afterwards) and dispatches on
// (X dtype, h dtype, chunk size) to one launch on the caller's stream.

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/backends.hpp"
#include "cuda/cuda_status.hpp"
#include "cuda/fast/fast_path.hpp"
#include "cuda/wy_dqkg_launch.hpp"
#include "cuda/wy_dqkg_make_params.hpp"
#include "cuda/wy_dqkg_params.hpp"

namespace kda::detail {

namespace {

using cuda::WyDqkgParams;

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

// The tensor-core path (cuda/fast/) takes every problem it supports (fast_path_supports); the
// general kernel takes the rest. It passed the GPU checks on an H200 on 2026-11-30
// (docs/gpu-validation.md). KDA_CUDA_KERNEL=general forces the general kernel for every problem
// (for comparisons and as an escape hatch); unset or "auto" is the default dispatch.
bool tensor_core_path_enabled() {
  static const bool enabled = [] {
    const char* choice = std::getenv("KDA_CUDA_KERNEL");
    return choice == nullptr || std::string(choice) != "general";
  }();
  return enabled;
}

// A kernel launched into a stream of another device than the tensors' one would run there and
// fault on the first access to the tensors (CUDA does not refuse such a launch), killing the
// caller's context. Refuse it instead, before anything is launched. The special handles (0, the
// legacy and per-thread default streams) mean the current device's default stream, which run_cuda
// makes the tensors' device. While the stream captures a graph, CUDA refuses cudaStreamGetDevice
// ("operation not permitted when stream is capturing", seen on the H200 under torch.cuda.graph)
// and the refusal invalidates the capture, so the check is skipped then: only
// cudaStreamIsCapturing is asked, which capture allows.
Status check_stream_device(cudaStream_t stream, int device) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return Status::Ok();
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (Status s = cuda::cuda_status(cudaStreamIsCapturing(stream, &capture),
                                   "cudaStreamIsCapturing (stream)");
      !s.ok()) {
    return s;
  }
  if (capture != cudaStreamCaptureStatusNone) return Status::Ok();
  int stream_device = -1;
  if (Status s = cuda::cuda_status(cudaStreamGetDevice(stream, &stream_device),
                                   "cudaStreamGetDevice (stream)");
      !s.ok()) {
    return s;
  }
  if (stream_device != device) {
    return {StatusCode::invalid_argument,
            "stream: belongs to cuda:" + std::to_string(stream_device) +
                " but the tensors are on cuda:" + std::to_string(device) +
                "; pass a stream of the tensors' device"};
  }
  return Status::Ok();
}

// The visible devices' compute capabilities (10 * major + minor; -1 where the query failed), read
// once: the driver reads CUDA_VISIBLE_DEVICES once per process, so they are fixed. Read together
// with the device count, so that later calls only look them up.
const std::vector<int>& device_capabilities() {
  static const std::vector<int> capabilities = [] {
    std::vector<int> found;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();  // clear our own error so a later launch check does not see it
      return found;
    }
    for (int d = 0; d < count; ++d) {
      int major = 0, minor = 0;
      if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess ||
          cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) != cudaSuccess) {
        (void)cudaGetLastError();
        found.push_back(-1);
        continue;
      }
      found.push_back(10 * major + minor);
    }
    return found;
  }();
  return capabilities;
}

// The build holds sm_90a code only (CMakeLists.txt), which runs on compute capability 9.0
// (Hopper: H100, H200) and nowhere else.
constexpr int kBuiltCapability = 90;

}  // namespace

bool cuda_device_present() {
  return !device_capabilities().empty();
}

bool cuda_device_supported() {
  for (int c : device_capabilities()) {
    if (c == kBuiltCapability) return true;
  }
  return false;
}

Status run_cuda(const Problem& problem, const Dims& dims, void* stream) {
  const int device = problem.q.device.index;
  const std::vector<int>& capability = device_capabilities();
  if (device >= 0 && device < static_cast<int>(capability.size()) &&
      capability[device] != kBuiltCapability) {
    return {StatusCode::unsupported,
            "backend: cuda:" + std::to_string(device) + " has compute capability " +
                std::to_string(capability[device] / 10) + "." +
                std::to_string(capability[device] % 10) +
                "; this build of libkda has kernels for sm_90a (compute capability 9.0, Hopper) "
                "only"};
  }
  if (dims.T == 0 || dims.B == 0 || dims.NT == 0) return Status::Ok();
  const WyDqkgParams params = cuda::make_wy_dqkg_params(problem, dims);

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
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  Status status = check_stream_device(cuda_stream, device);
  if (status.ok()) {
    status = tensor_core_path_enabled() && fast_path_supports(problem, dims)
                 ? launch_fast_path(problem, dims, cuda_stream)
                 : dispatch(params, dims, device, cuda_stream);
  }
  if (caller_device != device) {
    Status restored = cuda::cuda_status(
        cudaSetDevice(caller_device),
        "cudaSetDevice(" + std::to_string(caller_device) + ") restoring the caller's device");
    if (status.ok()) status = restored;
  }
  return status;
}

}  // namespace kda::detail
