#pragma once
// `kda run`: load or generate a problem, run it on a backend, check and time it, write it out.

#include "options.hpp"

namespace kda::cli {

// Returns the process exit status (exit_code.hpp); errors are reported on stderr.
int run_command(const RunOptions& options);

}  // namespace kda::cli
