#pragma once
// The ops' string options: `backend` (a name or None) and `cuda_kernel` (the public functions'
// `kernel`), with the ctypes path's messages.

#include <ATen/core/Tensor.h>

#include <optional>
#include <string_view>

#include "kda/backend.hpp"

namespace kda::torch_op {

// The backend `name` names; None runs CUDA tensors (q's device) on cuda and the rest on cpu.
// An unknown name is a ValueError naming 'backend'.
Backend backend_of(const std::optional<std::string_view>& name, const at::Tensor& q,
                   const char* op);
// The kernel `name` names; an unknown one is a ValueError naming 'kernel' (the public
// functions' keyword: the op's schema calls it cuda_kernel).
Kernel kernel_of(std::string_view name, const char* op);

}  // namespace kda::torch_op
