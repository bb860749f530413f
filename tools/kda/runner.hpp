#pragma once
// Runs an operator on a backend over a host problem: one warm-up run, then timed runs. The outputs
// of the problem hold the last run's results.

#include <vector>

#include "io/host_problem.hpp"
#include "kda/backend.hpp"
#include "kda/status.hpp"

namespace kda::cli {

struct Timing {
  std::vector<double> ms;  // one entry per timed run
  double median_ms() const;
  double min_ms() const;
};

// CPU backends are timed with a steady clock around the operator's run; the cuda backend uploads
// the problem, times with CUDA events and downloads the outputs (cuda_runner.hpp).
Status run_timed(const io::OpIo& op, Backend backend, Kernel kernel, io::HostProblem* problem,
                 int repeat, Timing* timing);

}  // namespace kda::cli
