#pragma once
// Backend entry points behind kda::run(). Each receives a validated problem and its dims.

#include "kda/problem.hpp"
#include "kda/status.hpp"

namespace kda::detail {

Status run_cpu_ref(const Problem& problem, const Dims& dims);
Status run_cpu(const Problem& problem, const Dims& dims);

#if KDA_WITH_CUDA
Status run_cuda(const Problem& problem, const Dims& dims, void* stream);
bool cuda_device_present();
#endif

}  // namespace kda::detail
