#pragma once
// `kda run <op>`: load or generate a problem of the operator, run it on a backend, check and time
// it, write it out.

#include "io/host_problem.hpp"
#include "op_cli.hpp"
#include "options.hpp"

namespace kda::cli {

// Returns the process exit status (exit_code.hpp); errors are reported on stderr. `op` is the
// operator's registration in io::ops(), `cli` its part of the tool (ops/<op>.cpp).
int run_command(const io::OpIo& op, const OpCli& cli, const RunOptions& options);

}  // namespace kda::cli
