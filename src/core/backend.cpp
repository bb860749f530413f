// Backends and kernel choices (kda/backend.hpp), and the checks every operator's run() makes
// before it hands a validated problem to a backend (core/run_checks.hpp).

#include "kda/backend.hpp"

#include <string>

#include "core/run_checks.hpp"
#include "cuda/common/devices.hpp"

namespace kda {

std::string_view backend_name(Backend backend) {
  switch (backend) {
    case Backend::cpu_ref:
      return "cpu-ref";
    case Backend::cpu:
      return "cpu";
    case Backend::cuda:
      return "cuda";
  }
  return "unknown-backend";
}

Status parse_backend(std::string_view name, Backend* out) {
  for (Backend b : {Backend::cpu_ref, Backend::cpu, Backend::cuda}) {
    if (name == backend_name(b)) {
      *out = b;
      return Status::Ok();
    }
  }
  return invalid_argument("backend: expected cpu-ref, cpu or cuda, got '" + std::string(name) +
                          "'");
}

bool backend_available(Backend backend) {
  switch (backend) {
    case Backend::cpu_ref:
      return true;
    case Backend::cpu:
      return detail::cpu_backend_supported();
    case Backend::cuda:
#if KDA_WITH_CUDA
      return cuda::device_supported();
#else
      return false;
#endif
  }
  return false;
}

std::string_view kernel_name(Kernel kernel) {
  switch (kernel) {
    case Kernel::auto_:
      return "auto";
    case Kernel::simt:
      return "simt";
    case Kernel::sm80_mma:
      return "sm80_mma";
  }
  return "unknown-kernel";
}

Status parse_kernel(std::string_view name, Kernel* out, std::string_view what) {
  for (Kernel k : {Kernel::auto_, Kernel::simt, Kernel::sm80_mma}) {
    if (name == kernel_name(k)) {
      *out = k;
      return Status::Ok();
    }
  }
  return invalid_argument(std::string(what) + ": expected auto, simt or sm80_mma, got '" +
                          std::string(name) + "'");
}

namespace detail {

// The cpu backends' files are compiled with -mavx2 -mfma (KDA_CPU_AVX2); on a processor without
// them they would die of an illegal instruction, so they are refused with a status instead.
bool cpu_backend_supported() {
#if defined(KDA_CPU_NEEDS_AVX2) && (defined(__x86_64__) || defined(__i386__))
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return true;
#endif
}

Status check_backend_call(Backend backend, Kernel kernel, const TensorView& anchor) {
  const bool on_cuda = anchor.device.type == DeviceType::cuda;
  switch (backend) {
    case Backend::cpu_ref:
    case Backend::cpu:
      if (on_cuda) {
        return invalid_argument("backend: " + std::string(backend_name(backend)) +
                                " needs tensors on the cpu, got " + device_name(anchor.device) +
                                " (use backend cuda)");
      }
      if (kernel != Kernel::auto_) {
        return invalid_argument("kernel: " + std::string(kernel_name(kernel)) +
                                " is a cuda kernel; backend " + std::string(backend_name(backend)) +
                                " takes kernel auto");
      }
      if (backend == Backend::cpu && !cpu_backend_supported()) {
        return {StatusCode::backend_unavailable,
                "backend: cpu was built for AVX2/FMA, which this processor lacks (use cpu-ref, or "
                "rebuild with -DKDA_CPU_AVX2=OFF)"};
      }
      return Status::Ok();
    case Backend::cuda:
#if KDA_WITH_CUDA
      if (!cuda::device_present()) {
        return {StatusCode::backend_unavailable,
                "backend: cuda is compiled in, but no CUDA device is visible"};
      }
      if (!on_cuda) {
        return invalid_argument("backend: cuda needs tensors on a CUDA device, got " +
                                device_name(anchor.device) + " (use backend cpu)");
      }
      return Status::Ok();
#else
      return {StatusCode::backend_unavailable,
              "backend: cuda was not compiled into this build of libkda (no nvcc at configure)"};
#endif
  }
  return invalid_argument("backend: unknown value " + std::to_string(static_cast<int>(backend)));
}

}  // namespace detail

}  // namespace kda
