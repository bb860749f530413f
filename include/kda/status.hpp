#pragma once
// Status codes and the Status value every entry point returns: the library never throws across
// its API and never exits.

#include <cstdint>
#include <string>
#include <utility>

namespace kda {

// Values match the C ABI's KDA_STATUS_* constants.
enum class StatusCode : int32_t {
  ok = 0,
  invalid_argument = 1,     // an argument breaks the SPEC contract; the message names it
  unsupported = 2,          // valid per SPEC but not implemented by the chosen backend
  backend_unavailable = 3,  // the backend was not built in, or no device is present
  cuda_error = 4,           // a CUDA runtime call or kernel launch failed
  internal = 5,             // a bug: please report it
};

const char* status_code_name(StatusCode code);

struct Status {
  StatusCode code = StatusCode::ok;
  std::string message;

  Status() = default;
  Status(StatusCode c, std::string m) : code(c), message(std::move(m)) {}
  static Status Ok() { return {}; }
  bool ok() const { return code == StatusCode::ok; }
};

inline Status invalid_argument(std::string message) {
  return {StatusCode::invalid_argument, std::move(message)};
}

}  // namespace kda
