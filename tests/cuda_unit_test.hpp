#pragma once
// What the nvcc-compiled unit tests (test_cuda_wgmma_units.cu, ops/*/test_*_units.cu) share: the
// skip without a visible GPU and the CUDA-call assertion. (The operator tests use cuda_device.hpp,
// which needs libkda's I/O.)

#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace kda::testing::unit {

// Number of visible CUDA devices (0 when there is no GPU or no driver; the error is cleared).
inline int visible_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace kda::testing::unit

#define SKIP_WITHOUT_GPU()                                                         \
  if (kda::testing::unit::visible_devices() == 0) {                                \
    GTEST_SKIP() << "no CUDA device visible: GPU test skipped (runs on the H200)"; \
  }

#define ASSERT_CUDA(expr)                                                          \
  do {                                                                             \
    const cudaError_t error_ = (expr);                                             \
    ASSERT_EQ(error_, cudaSuccess) << #expr << ": " << cudaGetErrorString(error_); \
  } while (0)
