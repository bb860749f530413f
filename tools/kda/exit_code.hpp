#pragma once
// Exit statuses of the kda tool and the one-line error report.

#include <string>

#include "kda/status.hpp"

namespace kda::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitCheckFailed = 1,  // --check: an output is above its bar
  kExitUsage = 2,        // bad option, bad file, invalid problem, backend not available
  kExitRuntime = 3,      // the backend failed while running (unsupported, CUDA error, bug)
};

// invalid_argument and backend_unavailable are the caller's to fix (2); the rest are failures of
// the run itself (3).
int exit_code_for(const Status& status);

// Prints "kda: error: <message>" as a single line on stderr and returns exit_code.
int report_error(const std::string& message, int exit_code);

// A progress line on stderr ("kda: <message>"): long runs say what they are doing.
void progress(const std::string& message);

}  // namespace kda::cli
