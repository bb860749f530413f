#pragma once
// Backends and CUDA kernel choices, shared by every operator.

#include <cstdint>
#include <string_view>

#include "kda/status.hpp"

namespace kda {

// Values match the C ABI's KDA_BACKEND_* constants.
enum class Backend : int32_t {
  cpu_ref = 0,  // float64, plain loops: the reference every other backend is checked against
  cpu = 1,      // float32 accumulation, threads over (chunk, head) units
  cuda = 2,     // sm_90a kernels on the caller's stream
};

// Values match the C ABI's KDA_KERNEL_* constants. Named by mechanism and architecture.
enum class Kernel : int32_t {
  auto_ = 0,     // the fastest kernel that takes the problem (or $KDA_CUDA_KERNEL's choice)
  simt = 1,      // float32 FFMA on the SIMT cores: every option and dtype of the contract
  sm80_mma = 2,  // mma.sync tensor-core kernels (built for sm_90a)
};

std::string_view backend_name(Backend backend);
// Parses "cpu-ref", "cpu" or "cuda".
Status parse_backend(std::string_view name, Backend* out);
// Built in and usable here (for cuda: compiled in and a visible device of compute capability
// 9.0, the one the sm_90a kernels run on).
bool backend_available(Backend backend);

std::string_view kernel_name(Kernel kernel);
// Parses "auto", "simt" or "sm80_mma"; the error names `what` (an argument or a variable).
Status parse_kernel(std::string_view name, Kernel* out, std::string_view what = "kernel");

}  // namespace kda
