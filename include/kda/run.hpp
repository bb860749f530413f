#pragma once
// The one entry point that runs the operator.

#include <string_view>

#include "kda/problem.hpp"
#include "kda/status.hpp"

namespace kda {

// Values match the C ABI's KDA_BACKEND_* constants.
enum class Backend : int32_t {
  cpu_ref = 0,  // float64, plain loops: the reference every other backend is checked against
  cpu = 1,      // float32 accumulation, Eigen products, threads over (chunk, head)
  cuda = 2,     // sm_90a kernels on the caller's stream
};

std::string_view backend_name(Backend backend);
// Parses "cpu-ref", "cpu" or "cuda".
Status parse_backend(std::string_view name, Backend* out);
// Built in and usable here (for cuda: compiled in and a visible device of compute capability
// 9.0, the one the sm_90a kernels run on).
bool backend_available(Backend backend);

// Validates, then runs. For Backend::cuda every tensor must live on one CUDA device; the work is
// queued on `stream` (a cudaStream_t; nullptr is the legacy default stream) with no allocation and
// no synchronization. CPU backends ignore `stream` and return when the outputs are written.
Status run(const Problem& problem, Backend backend, void* stream = nullptr);

}  // namespace kda
