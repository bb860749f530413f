// kda::run: validation once, then dispatch to a backend.

#include "kda/run.hpp"

#include <string>

#include "core/backends.hpp"

namespace kda {

namespace {

// The cpu backend's file is compiled with -mavx2 -mfma (KDA_CPU_AVX2); on a processor without
// them it would die of an illegal instruction, so it is refused with a status instead.
bool cpu_backend_supported() {
#if defined(KDA_CPU_NEEDS_AVX2) && (defined(__x86_64__) || defined(__i386__))
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return true;
#endif
}

}  // namespace

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
      return cpu_backend_supported();
    case Backend::cuda:
#if KDA_WITH_CUDA
      return detail::cuda_device_supported();
#else
      return false;
#endif
  }
  return false;
}

Status run(const Problem& problem, Backend backend, void* stream) {
  Dims dims;
  if (Status s = problem.validate(&dims); !s.ok()) return s;
  const bool on_cuda = problem.q.device.type == DeviceType::cuda;
  switch (backend) {
    case Backend::cpu_ref:
    case Backend::cpu:
      if (on_cuda) {
        return invalid_argument("backend: " + std::string(backend_name(backend)) +
                                " needs tensors on the cpu, got " + device_name(problem.q.device) +
                                " (use backend cuda)");
      }
      if (backend == Backend::cpu_ref) return detail::run_cpu_ref(problem, dims);
      if (!cpu_backend_supported()) {
        return {StatusCode::backend_unavailable,
                "backend: cpu was built for AVX2/FMA, which this processor lacks (use cpu-ref, or "
                "rebuild with -DKDA_CPU_AVX2=OFF)"};
      }
      return detail::run_cpu(problem, dims);
    case Backend::cuda:
#if KDA_WITH_CUDA
      if (!detail::cuda_device_present()) {
        return {StatusCode::backend_unavailable,
                "backend: cuda is compiled in, but no CUDA device is visible"};
      }
      if (!on_cuda) {
        return invalid_argument("backend: cuda needs tensors on a CUDA device, got " +
                                device_name(problem.q.device) + " (use backend cpu)");
      }
      return detail::run_cuda(problem, dims, stream);
#else
      (void)stream;
      return {StatusCode::backend_unavailable,
              "backend: cuda was not compiled into this build of libkda (no nvcc at configure)"};
#endif
  }
  return invalid_argument("backend: unknown value " + std::to_string(static_cast<int>(backend)));
}

}  // namespace kda
