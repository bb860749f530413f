#pragma once
// How the kernels' names in messages spell a dtype: "f32", "f16" or "bf16".

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace kda::cuda {

template <typename T>
constexpr const char* dtype_tag() {
  if constexpr (std::is_same_v<T, float>) {
    return "f32";
  } else if constexpr (std::is_same_v<T, __half>) {
    return "f16";
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "dtypes are float, __half or __nv_bfloat16");
    return "bf16";
  }
}

}  // namespace kda::cuda
