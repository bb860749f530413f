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

}  // namespace kda::cuda
