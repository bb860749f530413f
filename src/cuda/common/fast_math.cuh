#pragma once
// Device arithmetic shared by the kernels.

namespace kda::cuda {

// 2^x on the special-function unit (relative error about 2^-22; 0 for x below -126, no NaN for
// finite x).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace kda::cuda
