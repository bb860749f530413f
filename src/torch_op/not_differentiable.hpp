#pragma once
// The Autograd kernel of ops that are themselves backward steps (not differentiable).
//
// torch's boxed autogradNotImplementedFallback gives such an op the right behaviour (outputs of a
// call whose inputs require grad get a node whose backward raises, naming the op), but it walks
// the op's whole argument stack on every call, grad mode on or off. The ops' own Autograd kernels
// (ops.cpp) redispatch below autograd at once and pay for the node only when grad
// mode is on and an input requires grad: the usual case, a call from inside a backward pass,
// costs a thread-local read and one flag per tensor input.

#include <ATen/core/Tensor.h>

#include <span>

namespace kda::torch_op {

// When grad mode is on and one of `inputs` (undefined ones are skipped) requires grad, attaches
// a NotImplemented node ("derivative for <op> is not implemented") to `outputs`, so that a
// backward through them raises; otherwise does nothing.
void mark_not_differentiable(const char* op, std::span<const at::Tensor> inputs,
                             std::span<at::Tensor> outputs);

}  // namespace kda::torch_op
