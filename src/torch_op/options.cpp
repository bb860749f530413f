#include "torch_op/options.hpp"

#include <string>

#include "torch_op/status.hpp"

namespace kda::torch_op {

namespace {

constexpr Backend kBackends[] = {Backend::cpu_ref, Backend::cpu, Backend::cuda};
constexpr Kernel kKernels[] = {Kernel::auto_, Kernel::simt, Kernel::sm80_mma};

// Python's repr of a str without quotes in it, as the ctypes path prints the bad value. Built by
// appending: GCC 12's -Wrestrict misreads "'" + std::string(name) as an overlapping copy.
std::string quoted(std::string_view name) {
  std::string out;
  out.reserve(name.size() + 2);
  out.append(1, '\'').append(name).append(1, '\'');
  return out;
}

}  // namespace

Backend backend_of(const std::optional<std::string_view>& name, const at::Tensor& q,
                   const char* op) {
  if (!name.has_value()) return q.is_cuda() ? Backend::cuda : Backend::cpu;
  std::string names;
  for (Backend backend : kBackends) {
    if (*name == backend_name(backend)) return backend;
    names += quoted(backend_name(backend)) + ", ";
  }
  throw_value_error(std::string(op) + ": argument 'backend': expected None, " + names + "got " +
                    quoted(*name));
}

Kernel kernel_of(std::string_view name, const char* op) {
  std::string names;
  for (Kernel kernel : kKernels) {
    if (name == kernel_name(kernel)) return kernel;
    names += (names.empty() ? "" : ", ") + quoted(kernel_name(kernel));
  }
  throw_value_error(std::string(op) + ": argument 'kernel': expected one of " + names + ", got " +
                    quoted(name));
}

}  // namespace kda::torch_op
