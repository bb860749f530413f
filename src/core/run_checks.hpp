#pragma once
// What every operator's run() checks between validation and its backend.

#include "kda/args.hpp"
#include "kda/backend.hpp"
#include "kda/status.hpp"
#include "kda/tensor.hpp"

namespace kda::detail {

// The cpu backend's AVX2/FMA build can run on this processor.
bool cpu_backend_supported();

// Tensors (`anchor`: the first input) on the backend's device type, the backend usable here, and
// CPU backends given kernel auto.
Status check_backend_call(Backend backend, Kernel kernel, const TensorView& anchor);

// An operator's backend entry points, for run_validated. `cuda` is null in a build without CUDA
// (check_backend_call refuses the cuda backend there first).
template <typename P, typename Dims>
struct OpBackends {
  Status (*cpu_ref)(const P&, const Dims&);
  Status (*cpu)(const P&, const Dims&);
  Status (*cuda)(const P&, const Dims&, Kernel, void* stream);
};

// The body of every operator's kda::run: validation once, the backend checks, then the backend.
template <typename P, typename Dims>
Status run_validated(const P& problem, Backend backend, void* stream, Kernel kernel,
                     const OpBackends<P, Dims>& backends) {
  Dims dims;
  if (Status s = problem.validate(&dims); !s.ok()) return s;
  if (Status s = check_backend_call(backend, kernel, anchor_of(problem)); !s.ok()) return s;
  switch (backend) {
    case Backend::cpu_ref:
      return backends.cpu_ref(problem, dims);
    case Backend::cpu:
      return backends.cpu(problem, dims);
    case Backend::cuda:
      if (backends.cuda != nullptr) return backends.cuda(problem, dims, kernel, stream);
      break;
  }
  return {StatusCode::internal, "run: no backend took the call"};
}

}  // namespace kda::detail
