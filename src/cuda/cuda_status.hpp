#pragma once
// CUDA runtime errors as kda::Status: "cuda: <what> failed: <cudaGetErrorString>".

#include <cuda_runtime.h>

#include <string>

#include "kda/status.hpp"

namespace kda::cuda {

inline Status cuda_status(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return Status::Ok();
  return {StatusCode::cuda_error,
          "cuda: " + what + " failed: " + std::string(cudaGetErrorString(error))};
}

}  // namespace kda::cuda
