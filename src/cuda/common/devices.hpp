#pragma once
// The visible CUDA devices, and the frame every operator's CUDA backend runs its launches in.
// Plain C++ (no CUDA headers), so the core can ask whether a usable device is present.

#include <type_traits>

#include "kda/status.hpp"

namespace kda::cuda {

// A reference to a callable returning Status, for run_on_device: no copy and no allocation (a
// std::function of a lambda capturing more than two references allocates on every call). The
// callable must outlive the reference; a lambda passed straight to run_on_device does.
class LaunchRef {
 public:
  // Implicit, so that call sites pass their lambda as it is.
  template <typename F>
  requires(!std::is_same_v<F, LaunchRef>) LaunchRef(const F& f)
      : object_(&f), call_([](const void* object) { return (*static_cast<const F*>(object))(); }) {}
  Status operator()() const { return call_(object_); }

 private:
  const void* object_;
  Status (*call_)(const void*);
};

// A CUDA device is visible / one this build has kernels for (compute capability 9.0) is.
bool device_present();
bool device_supported();

// Runs `launch` with `device` current, on the caller's `stream` (a cudaStream_t; nullptr is the
// legacy default stream), and makes the caller's device current again afterwards, whatever
// `launch` returned. Refuses first, launching nothing: a device of another compute capability
// than the build's (unsupported), and a stream of another device (invalid_argument naming
// `stream`; CUDA itself accepts such a launch, which then faults on the first access).
Status run_on_device(int device, void* stream, LaunchRef launch);

}  // namespace kda::cuda
