#include "cuda/common/kernel_attributes.hpp"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "cuda/common/cuda_status.hpp"

namespace kda::cuda {

Status ensure_max_dynamic_smem(const void* kernel, int device, int bytes, const char* kernel_name) {
  // cudaFuncSetAttribute acts on the current device's context, so the key includes the device.
  // The limit only ever grows: a kernel launched with several sizes (the chunk_bwd_intra kernel's
  // depends on K) keeps the largest asked for, so a later smaller request cannot lower it under
  // an earlier, larger launch (that once made such launches fail with "invalid argument"). The
  // lock covers only host bookkeeping and the attribute call, which does not synchronize.
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> configured;  // (kernel, device) -> bytes
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(kernel, device);
  const auto it = configured.find(key);
  if (it != configured.end() && it->second >= bytes) return Status::Ok();
  const cudaError_t error =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (error != cudaSuccess) {
    return cuda_status(error, "cudaFuncSetAttribute(" + std::string(kernel_name) +
                                  ", MaxDynamicSharedMemorySize = " + std::to_string(bytes) + ")");
  }
  configured[key] = bytes;
  return Status::Ok();
}

Status device_facts(int device, DeviceFacts* out) {
  static std::mutex mutex;
  static std::map<int, DeviceFacts> known;
  const std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(device); it != known.end()) {
    *out = it->second;
    return Status::Ok();
  }
  DeviceFacts f;
  if (Status s = cuda_status(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, device),
                             "cudaDeviceGetAttribute(MultiProcessorCount)");
      !s.ok()) {
    return s;
  }
  if (Status s = cuda_status(
          cudaDeviceGetAttribute(&f.max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
          "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
      !s.ok()) {
    return s;
  }
  known[device] = f;
  *out = f;
  return Status::Ok();
}

}  // namespace kda::cuda
