#include <cuda_runtime.h>

#include "core/backends.hpp"

namespace kda::detail {

bool cuda_device_present() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

Status run_cuda(const Problem&, const Dims&, void*) {
  return {StatusCode::unsupported, "cuda: not implemented yet"};
}

}  // namespace kda::detail
