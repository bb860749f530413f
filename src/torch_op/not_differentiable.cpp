// mark_not_differentiable: the rare path of the ops' Autograd kernels (not_differentiable.hpp).

#include "torch_op/not_differentiable.hpp"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>
#include <utility>

namespace kda::torch_op {

void mark_not_differentiable(const char* op, std::span<const at::Tensor> inputs,
                             std::span<at::Tensor> outputs) {
  if (!torch::autograd::GradMode::is_enabled()) return;
  bool any = false;
  for (const at::Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  if (!any) return;
  torch::autograd::edge_list edges;
  for (const at::Tensor& t : inputs) {
    if (t.defined()) edges.push_back(torch::autograd::impl::gradient_edge(t));
  }
  std::shared_ptr<torch::autograd::NotImplemented> node(new torch::autograd::NotImplemented(op),
                                                        torch::autograd::deleteNode);
  node->set_next_edges(std::move(edges));
  for (at::Tensor& t : outputs) torch::autograd::set_history(t, node);
}

}  // namespace kda::torch_op
