#pragma once
// The cuda backend path of `kda run`: libkda's cuda backend takes device pointers, so the problem
// is uploaded, run on a stream and timed with CUDA events, and the outputs downloaded.
// cuda_runner.cpp implements it when the build has CUDA; cuda_runner_stub.cpp otherwise.

#include "io/host_problem.hpp"
#include "kda/status.hpp"
#include "runner.hpp"

namespace kda::cli {

// Ok when the cuda backend can run here: built in, and a device visible. Checked before any
// work, so `--backend cuda` on a machine without one fails at once.
Status cuda_ready();

// The outputs are uploaded poisoned (NaN) too, so an element the kernel fails to write shows up
// in the check. Inputs are not rotated between runs: on a problem that fits in L2 the time is
// flattered (bench/ measures with rotated inputs).
Status run_timed_cuda(io::HostProblem* problem, int repeat, Timing* timing);

}  // namespace kda::cli
