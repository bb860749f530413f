#pragma once
// What `kda run` prints on stdout: the problem, the error table and the timing table.

#include <cstdint>
#include <string>
#include <utility>

#include "io/host_problem.hpp"
#include "kda/backend.hpp"
#include "op_cli.hpp"
#include "reference_check.hpp"
#include "runner.hpp"

namespace kda::cli {

void print_problem(const std::string& source, const io::OpIo& op, const io::HostProblem& problem,
                   const ProblemSummary& summary, Backend backend, Kernel kernel);
void print_check(const CheckReport& report);
// A line for a check that was not made, and why.
void print_check_skipped(const std::string& why);
// `bytes`: (read, written), the operator's SPEC count.
void print_timing(Backend backend, const Timing& timing, std::pair<int64_t, int64_t> bytes);

}  // namespace kda::cli
