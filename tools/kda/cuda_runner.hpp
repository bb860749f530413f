#pragma once
// The cuda backend path of `kda run`: libkda's cuda backend takes device pointers, so the problem
// is uploaded, run on a stream and timed with CUDA events, and the outputs downloaded.
// cuda_runner.cpp implements it when the build has CUDA; cuda_runner_stub.cpp otherwise.

#include "io/host_problem.hpp"
#include "kda/backend.hpp"
#include "kda/status.hpp"
#include "runner.hpp"

namespace kda::cli {

// Ok when the cuda backend can run here: built in, and a device visible. Checked before any
// work, so `--backend cuda` on a machine without one fails at once.
Status cuda_ready();

// Every tensor of the problem is uploaded, the outputs poisoned (NaN) as they are on the host, so
// an element the kernel fails to write shows up in the check. Inputs are not rotated between
// runs: on a problem that fits in L2 the time is flattered (bench/ measures with rotated inputs).
Status run_timed_cuda(const io::OpIo& op, Kernel kernel, io::HostProblem* problem, int repeat,
                      Timing* timing);

}  // namespace kda::cli
