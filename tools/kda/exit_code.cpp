#include "exit_code.hpp"

#include <cstdio>

namespace kda::cli {

int exit_code_for(const Status& status) {
  switch (status.code) {
    case StatusCode::ok:
      return kExitOk;
    case StatusCode::invalid_argument:
    case StatusCode::backend_unavailable:
      return kExitUsage;
    case StatusCode::unsupported:
    case StatusCode::cuda_error:
    case StatusCode::internal:
      return kExitRuntime;
  }
  return kExitRuntime;
}

int report_error(const std::string& message, int exit_code) {
  // One line whatever the message holds, so scripts can grep for it.
  std::string line = message;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fprintf(stderr, "kda: error: %s\n", line.c_str());
  return exit_code;
}

void progress(const std::string& message) {
  std::fprintf(stderr, "kda: %s\n", message.c_str());
  std::fflush(stderr);
}

}  // namespace kda::cli
