#pragma once
// What every operator's run() checks between validation and its backend.

#include "kda/backend.hpp"
#include "kda/status.hpp"
#include "kda/tensor.hpp"

namespace kda::detail {

// The cpu backend's AVX2/FMA build can run on this processor.
bool cpu_backend_supported();

// Tensors (`anchor`: the first input) on the backend's device type, the backend usable here, and
// CPU backends given kernel auto.
Status check_backend_call(Backend backend, Kernel kernel, const TensorView& anchor);

// `requested`, or when it is auto the kernel that $KDA_CUDA_KERNEL names (auto when unset); an
// unknown value is an error naming the variable.
Status effective_kernel(Kernel requested, Kernel* out);

}  // namespace kda::detail
