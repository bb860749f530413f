#include "core/backends.hpp"
namespace kda::detail {
Status run_cpu(const Problem&, const Dims&) {
  return {StatusCode::unsupported, "cpu: not implemented yet"};
}
}  // namespace kda::detail
