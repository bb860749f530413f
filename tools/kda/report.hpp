#pragma once
// What `kda run` prints on stdout: the problem, the error table and the timing table.

#include <cstdint>
#include <string>

#include "io/host_problem.hpp"
#include "kda/problem.hpp"
#include "kda/run.hpp"
#include "reference_check.hpp"
#include "runner.hpp"

namespace kda::cli {

// SPEC's bytes: every tensor of the problem (inputs read once, outputs written once) at its dtype.
int64_t bytes_moved(const io::HostProblem& problem);

void print_problem(const std::string& source, const io::HostProblem& problem, const Dims& dims,
                   Backend backend);
void print_check(const CheckReport& report);
// A line for a check that was not made, and why.
void print_check_skipped(const std::string& why);
void print_timing(Backend backend, const Timing& timing, int64_t bytes);

}  // namespace kda::cli
