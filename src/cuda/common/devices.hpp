#pragma once
// The visible CUDA devices, and the frame every operator's CUDA backend runs its launches in.
// Plain C++ (no CUDA headers), so the core can ask whether a usable device is present.

#include <functional>

#include "kda/status.hpp"

namespace kda::cuda {

// A CUDA device is visible / one this build has kernels for (compute capability 9.0) is.
bool device_present();
bool device_supported();

// Runs `launch` with `device` current, on the caller's `stream` (a cudaStream_t; nullptr is the
// legacy default stream), and makes the caller's device current again afterwards, whatever
// `launch` returned. Refuses first, launching nothing: a device of another compute capability
// than the build's (unsupported), and a stream of another device (invalid_argument naming
// `stream`; CUDA itself accepts such a launch, which then faults on the first access).
Status run_on_device(int device, void* stream, const std::function<Status()>& launch);

}  // namespace kda::cuda
