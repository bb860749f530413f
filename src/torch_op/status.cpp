#include "torch_op/status.hpp"

#include <c10/util/Exception.h>

#include "torch_op/library_info.hpp"

namespace kda::torch_op {

void throw_type_error(const std::string& message) {
  C10_THROW_ERROR(TypeError, message);
}

void throw_value_error(const std::string& message) {
  C10_THROW_ERROR(ValueError, message);
}

void check(const Status& status, const char* op) {
  if (status.ok()) return;
  const std::string message = std::string(op) + ": " + status.message;
  switch (status.code) {
    case StatusCode::invalid_argument:
      // libkda words every dtype complaint "expected dtype ..." or "expected the dtype of ...".
      if (message.find("expected dtype") != std::string::npos ||
          message.find("expected the dtype") != std::string::npos) {
        throw_type_error(message);
      }
      throw_value_error(message);
    case StatusCode::unsupported:
      C10_THROW_ERROR(NotImplementedError, message);
    case StatusCode::backend_unavailable:
      // Which libkda was loaded is the first thing to know when a backend is missing.
      C10_THROW_ERROR(Error, message + " (library: " + libkda_path() + ")");
    default:
      C10_THROW_ERROR(Error,
                      message + " (status " + std::to_string(static_cast<int>(status.code)) + ")");
  }
}

}  // namespace kda::torch_op
