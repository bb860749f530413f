#include "torch_op/tensors.hpp"

#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>

#include <string>

#include "torch_op/status.hpp"

namespace kda::torch_op {

namespace {

// torch's dtypes that have a libkda code; the codes are libkda's to accept or refuse per
// argument (int32/int64 only for the index tensors, float64 nowhere yet).
bool dtype_code(at::ScalarType type, DType* out) {
  switch (type) {
    case at::kHalf:
      *out = DType::f16;
      return true;
    case at::kBFloat16:
      *out = DType::bf16;
      return true;
    case at::kFloat:
      *out = DType::f32;
      return true;
    case at::kDouble:
      *out = DType::f64;
      return true;
    case at::kInt:
      *out = DType::i32;
      return true;
    case at::kLong:
      *out = DType::i64;
      return true;
    default:
      return false;
  }
}

std::string where(const char* op, const char* name) {
  return std::string(op) + ": argument '" + name + "'";
}

// View of a tensor whose dtype, layout and device were checked (or are known good).
TensorView view(const at::Tensor& tensor, DType dtype, void* data) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  const int64_t rank = tensor.dim();
  view.rank = static_cast<int32_t>(rank);
  const auto sizes = tensor.sizes();
  const auto strides = tensor.strides();
  for (int64_t d = 0; d < rank; ++d) {
    view.shape[d] = sizes[d];
    view.strides[d] = strides[d];
  }
  const c10::Device device = tensor.device();
  view.device =
      device.is_cuda() ? Device{DeviceType::cuda, device.index()} : Device{DeviceType::cpu, 0};
  return view;
}

}  // namespace

TensorView input_view(const at::Tensor& tensor, const char* op, const char* name) {
  DType dtype{};
  if (!dtype_code(tensor.scalar_type(), &dtype)) {
    throw_type_error(where(op, name) +
                     ": expected dtype float16, bfloat16, float32, int32 or int64, got torch." +
                     c10::getDtypeNames(tensor.scalar_type()).first);
  }
  if (tensor.layout() != at::kStrided) {
    throw_value_error(where(op, name) + ": expected a dense (strided) tensor, got " +
                      c10::str(tensor.layout()));
  }
  const c10::Device device = tensor.device();
  if (!device.is_cpu() && !device.is_cuda()) {
    throw_value_error(where(op, name) + ": expected a cpu or cuda tensor, got one on " +
                      device.str());
  }
  if (tensor.dim() > kMaxRank) {
    throw_value_error(where(op, name) + ": rank " + std::to_string(tensor.dim()) +
                      " is outside 0.." + std::to_string(kMaxRank));
  }
  // const_data_ptr: a read-only access, which must not materialize a lazily copied (COW)
  // storage the way data_ptr() would.
  return view(tensor, dtype, const_cast<void*>(tensor.const_data_ptr()));
}

TensorView input_view(const std::optional<at::Tensor>& tensor, const char* op, const char* name) {
  return tensor.has_value() ? input_view(*tensor, op, name) : TensorView{};
}

TensorView output_view(const at::Tensor& tensor) {
  DType dtype{};
  dtype_code(tensor.scalar_type(), &dtype);  // one of q's dtypes, or float32: always known
  return view(tensor, dtype, tensor.mutable_data_ptr());
}

int64_t extent(const at::Tensor& tensor, int64_t rank, int64_t dim) {
  return tensor.dim() == rank ? tensor.size(dim) : 0;
}

at::Tensor new_output(const at::Tensor& q, std::initializer_list<int64_t> sizes,
                      at::ScalarType dtype) {
  return at::empty(sizes, q.options().dtype(dtype));
}

}  // namespace kda::torch_op
