#pragma once
// Fills the kernels' parameter block from a validated problem; shared by the general kernel and
// the tensor-core path.

#include "cuda/wy_dqkg_params.hpp"
#include "kda/problem.hpp"

namespace kda::cuda {

WyDqkgParams make_wy_dqkg_params(const Problem& problem, const Dims& dims);

}  // namespace kda::cuda
