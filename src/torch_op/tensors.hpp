#pragma once
// torch tensors as libkda TensorViews, and the operators' new outputs.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <initializer_list>
#include <optional>

#include "kda/tensor.hpp"

namespace kda::torch_op {

// The view of argument `name` of operator `op` (its fla name): pointer, dtype, shape, element
// strides, device. Throws c10::TypeError for a dtype libkda has no code for, and c10::ValueError
// for a non-strided tensor, a device other than cpu/cuda or a rank a TensorView cannot hold
// (above kMaxRank, worded as the C ABI words it), naming the argument; every other rule (ranks,
// shapes, dtypes per argument, devices) is libkda's to check.
TensorView input_view(const at::Tensor& tensor, const char* op, const char* name);
// An omitted optional argument is the empty view.
TensorView input_view(const std::optional<at::Tensor>& tensor, const char* op, const char* name);
// The view of an output made by new_output (contiguous, writable).
TensorView output_view(const at::Tensor& tensor);

// Extent `dim` of `tensor` when it has rank `rank`, else 0. Outputs are sized from inputs whose
// ranks libkda checks only later: a wrong rank then gives an empty output and libkda's error
// naming the input, never an allocation sized by a wrong extent.
int64_t extent(const at::Tensor& tensor, int64_t rank, int64_t dim);

// A new contiguous tensor of `sizes` and `dtype` on q's device.
at::Tensor new_output(const at::Tensor& q, std::initializer_list<int64_t> sizes,
                      at::ScalarType dtype);

}  // namespace kda::torch_op
