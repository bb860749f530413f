#pragma once
// The operators' outputs: allocated from one list of specs, which also describes them to libkda.

#include <ATen/core/Tensor.h>

#include <array>
#include <cstddef>
#include <exception>
#include <vector>

#include "kda/tensor.hpp"
#include "torch_op/status.hpp"
#include "torch_op/tensors.hpp"

namespace kda::torch_op {

// One output of problem type P: its sizes (rank <= KDA_MAX_RANK), dtype and member (from its table
// row).
template <typename P>
struct OutputSpec {
  std::array<int64_t, KDA_MAX_RANK> sizes;
  size_t rank;
  at::ScalarType dtype;
  TensorView P::*member;
};

// Allocates every output on q's device and points the problem's output views at them. Outputs
// are allocated before validation, which kda::run does: nothing is checked twice on the hot path.
// When they cannot be allocated, a call that could not run anyway says why (libkda's error naming
// the argument, from validating it with placeholder outputs: a bad chunk_size, not "can't
// allocate 64 TiB"), and a valid one keeps the allocation's error.
template <typename P>
std::vector<at::Tensor> allocate_outputs(P& problem, const at::Tensor& q,
                                         const std::vector<OutputSpec<P>>& specs, const char* op) {
  const size_t N = specs.size();
  std::vector<at::Tensor> outputs(N);
  try {
    for (size_t i = 0; i < N; ++i) {
      outputs[i] = new_output(q, {specs[i].sizes.data(), specs[i].rank}, specs[i].dtype);
    }
  } catch (const std::exception&) {
    Placeholders placeholders(q);
    for (const OutputSpec<P>& spec : specs) {
      if (!placeholders.next({spec.sizes.data(), spec.rank}, spec.dtype, &(problem.*spec.member)))
        throw;
    }
    check(problem.validate(), op);
    throw;
  }
  for (size_t i = 0; i < N; ++i) problem.*specs[i].member = output_view(outputs[i]);
  return outputs;
}

}  // namespace kda::torch_op
