#pragma once
// libkda's statuses as the exceptions a Python caller gets: the same classes and messages as the
// package's ctypes path (python/kda_kernels/_errors.py), so that either implementation of an op
// fails alike. torch turns c10::TypeError, c10::ValueError and c10::NotImplementedError into
// Python's TypeError, ValueError and NotImplementedError, and any other c10::Error into
// RuntimeError.

#include <string>

#include "kda/status.hpp"

namespace kda::torch_op {

[[noreturn]] void throw_type_error(const std::string& message);
[[noreturn]] void throw_value_error(const std::string& message);

// Throws for a failed `status` of operator `op` (its fla name, which prefixes the message):
// invalid_argument is a TypeError when libkda complains about a dtype, else a ValueError;
// unsupported a NotImplementedError; backend_unavailable a RuntimeError naming the loaded
// libkda; anything else a RuntimeError with the status code. Returns when the status is ok.
void check(const Status& status, const char* op);

}  // namespace kda::torch_op
