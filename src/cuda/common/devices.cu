// The visible devices and run_on_device (devices.hpp).

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/devices.hpp"

namespace kda::cuda {

namespace {

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

// The special handles (0, the legacy and per-thread default streams) mean the current device's
// default stream, which run_on_device makes the tensors' device. With one visible device every
// stream is that device's, which the tensors are on (run_on_device made it current): nothing to
// ask per call. While the stream captures a graph, CUDA refuses cudaStreamGetDevice ("operation
// not permitted when stream is capturing", seen on the H200 under torch.cuda.graph) and the
// refusal invalidates the capture, so the check is skipped then: only cudaStreamIsCapturing is
// asked, which capture allows.
Status check_stream_device(cudaStream_t stream, int device) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return Status::Ok();
  }
  if (device_capabilities().size() == 1) return Status::Ok();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (Status s =
          cuda_status(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing (stream)");
      !s.ok()) {
    return s;
  }
  if (capture != cudaStreamCaptureStatusNone) return Status::Ok();
  int stream_device = -1;
  if (Status s =
          cuda_status(cudaStreamGetDevice(stream, &stream_device), "cudaStreamGetDevice (stream)");
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

}  // namespace

bool device_present() {
  return !device_capabilities().empty();
}

bool device_supported() {
  for (int c : device_capabilities()) {
    if (c == kBuiltCapability) return true;
  }
  return false;
}

Status run_on_device(int device, void* stream, LaunchRef launch) {
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
  // With one visible device the current device is that one, the tensors' (device 0): no device
  // to ask for, switch or restore, and no stream of another device exists (check_stream_device).
  if (capability.size() == 1 && device == 0) return launch();
  int caller_device = 0;
  if (Status s = cuda_status(cudaGetDevice(&caller_device), "cudaGetDevice"); !s.ok()) return s;
  if (caller_device != device) {
    if (Status s =
            cuda_status(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
        !s.ok()) {
      return s;
    }
  }
  Status status = check_stream_device(static_cast<cudaStream_t>(stream), device);
  if (status.ok()) status = launch();
  if (caller_device != device) {
    Status restored =
        cuda_status(cudaSetDevice(caller_device), "cudaSetDevice(" + std::to_string(caller_device) +
                                                      ") restoring the caller's device");
    if (status.ok()) status = restored;
  }
  return status;
}

}  // namespace kda::cuda
