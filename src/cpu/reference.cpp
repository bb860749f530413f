#include "core/backends.hpp"
namespace kda::detail {
Status run_cpu_ref(const Problem&, const Dims&) {
  return {StatusCode::unsupported, "cpu-ref: not implemented yet"};
}
}  // namespace kda::detail
