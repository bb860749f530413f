#pragma once
// CUDA runtime errors as kda::Status: "cuda: <what> failed: <cudaGetErrorString>".

#include <cuda_runtime.h>

#include <string>

#include "kda/status.hpp"

namespace kda::cuda {

// A failed runtime call also leaves its error as the thread's "last error"; it is cleared here,
// once reported, so that the next call's post-launch cudaGetLastError() does not report it
// again for a launch that succeeded. (A sticky error stays: CUDA cannot clear those.)
inline Status cuda_status(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();
  return {StatusCode::cuda_error,
          "cuda: " + what + " failed: " + std::string(cudaGetErrorString(error))};
}

// The status of the launch just queued (cudaGetLastError), worded "launch of <kernel_name>" only
// when it failed: no string is built per successful call.
inline Status launch_status(const std::string& kernel_name) {
  const cudaError_t launched = cudaGetLastError();
  if (launched == cudaSuccess) return Status::Ok();
  return cuda_status(launched, "launch of " + kernel_name);
}

}  // namespace kda::cuda
