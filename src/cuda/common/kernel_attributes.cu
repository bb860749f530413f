#include "cuda/common/kernel_attributes.hpp"

#include <cuda_runtime.h>

#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "cuda/common/cuda_status.hpp"

namespace kda::cuda {

Status ensure_max_dynamic_smem(const void* kernel, int device, int bytes, const char* kernel_name) {
  // cudaFuncSetAttribute acts on the current device's context, so the key includes the device.
  // The lock covers only host bookkeeping and the attribute call, which does not synchronize.
  static std::mutex mutex;
  static std::set<std::tuple<const void*, int, int>> configured;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(kernel, device, bytes);
  if (configured.count(key) != 0) return Status::Ok();
  const cudaError_t error =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (error != cudaSuccess) {
    return cuda_status(error, "cudaFuncSetAttribute(" + std::string(kernel_name) +
                                  ", MaxDynamicSharedMemorySize = " + std::to_string(bytes) + ")");
  }
  configured.insert(key);
  return Status::Ok();
}

}  // namespace kda::cuda
