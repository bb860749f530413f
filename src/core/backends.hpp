#pragma once
// Backend entry points behind kda::run(). Each receives a validated problem and its dims.

#include "kda/problem.hpp"
#include "kda/status.hpp"

namespace kda::detail {

Status run_cpu_ref(const Problem& problem, const Dims& dims);
Status run_cpu(const Problem& problem, const Dims& dims);

#if KDA_WITH_CUDA
Status run_cuda(const Problem& problem, const Dims& dims, void* stream);
// A CUDA device is visible / one this build has kernels for (compute capability 9.0) is.
bool cuda_device_present();
bool cuda_device_supported();
#endif

}  // namespace kda::detail
