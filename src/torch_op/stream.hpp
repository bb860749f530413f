#pragma once
// torch's current CUDA stream, without CUDA headers.

#include <c10/core/Device.h>

#include "kda/backend.hpp"

namespace kda::torch_op {

// The stream a cuda run goes on: torch's current stream on `device` (a cudaStream_t), which is
// what a caller, or a CUDA graph being captured, expects the work on. nullptr for the CPU
// backends, and for a cuda run on non-CUDA tensors (libkda refuses those by name).
void* stream_for(Backend backend, const c10::Device& device);

}  // namespace kda::torch_op
