#include "kda/status.hpp"

namespace kda {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::ok:
      return "ok";
    case StatusCode::invalid_argument:
      return "invalid_argument";
    case StatusCode::unsupported:
      return "unsupported";
    case StatusCode::backend_unavailable:
      return "backend_unavailable";
    case StatusCode::cuda_error:
      return "cuda_error";
    case StatusCode::internal:
      return "internal";
  }
  return "unknown_status";
}

}  // namespace kda
