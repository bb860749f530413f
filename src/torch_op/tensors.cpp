#include "torch_op/tensors.hpp"

#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <string>

#include "torch_op/status.hpp"

namespace kda::torch_op {

namespace {

std::string where(const char* op, const char* name) {
  return std::string(op) + ": argument '" + name + "'";
}

// The layout as Python prints it (the ctypes path's message), or "a nested tensor".
std::string layout_name(const at::Tensor& tensor) {
  if (tensor.is_nested()) return "a nested tensor";
  switch (tensor.layout()) {
    case at::kStrided:
      return "torch.strided";
    case at::kSparse:
      return "torch.sparse_coo";
    case at::kSparseCsr:
      return "torch.sparse_csr";
    case at::kSparseCsc:
      return "torch.sparse_csc";
    case at::kSparseBsr:
      return "torch.sparse_bsr";
    case at::kSparseBsc:
      return "torch.sparse_bsc";
    case at::kMkldnn:
      return "torch._mkldnn";
    case at::kJagged:
      return "torch.jagged";
    default:
      return c10::str(tensor.layout());
  }
}

}  // namespace

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

namespace {

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

TensorView input_view(const at::Tensor& tensor, const char* op, const char* name,
                      const char* dtypes) {
  if (!tensor.defined()) throw_type_error(where(op, name) + ": expected a torch.Tensor, got None");
  DType dtype{};
  if (!dtype_code(tensor.scalar_type(), &dtype)) {
    throw_type_error(where(op, name) + ": expected dtype " + dtypes + ", got torch." +
                     c10::getDtypeNames(tensor.scalar_type()).first);
  }
  if (tensor.layout() != at::kStrided || tensor.is_nested()) {
    throw_value_error(where(op, name) + ": expected a dense (strided) tensor, got " +
                      layout_name(tensor));
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

TensorView input_view(const std::optional<at::Tensor>& tensor, const char* op, const char* name,
                      const char* dtypes) {
  return tensor.has_value() ? input_view(*tensor, op, name, dtypes) : TensorView{};
}

TensorView output_view(const at::Tensor& tensor) {
  DType dtype{};
  dtype_code(tensor.scalar_type(), &dtype);  // one of q's dtypes, or float32: always known
  return view(tensor, dtype, tensor.mutable_data_ptr());
}

int64_t extent(const at::Tensor& tensor, int64_t rank, int64_t dim) {
  return tensor.dim() == rank ? tensor.size(dim) : 0;
}

at::Tensor new_output(const at::Tensor& q, c10::IntArrayRef sizes, at::ScalarType dtype) {
  return at::empty(sizes, q.options().dtype(dtype));
}

Placeholders::Placeholders(const at::Tensor& q) {
  const c10::Device device = q.device();
  device_ =
      device.is_cuda() ? Device{DeviceType::cuda, device.index()} : Device{DeviceType::cpu, 0};
}

bool Placeholders::next(c10::IntArrayRef sizes, at::ScalarType type, TensorView* out) {
  constexpr uint64_t kEnd = uint64_t{1} << 63;
  constexpr uint64_t kAlign = uint64_t{1} << 12;
  DType dtype{};
  dtype_code(type, &dtype);
  TensorView view;
  view.data = reinterpret_cast<void*>(static_cast<uintptr_t>(address_));
  view.dtype = dtype;
  view.rank = static_cast<int32_t>(sizes.size());
  view.device = device_;
  uint64_t count = 1;  // elements so far, innermost first: each stride
  for (int64_t d = view.rank - 1; d >= 0; --d) {
    view.shape[d] = sizes[d];
    view.strides[d] = static_cast<int64_t>(count);
    const uint64_t extent = static_cast<uint64_t>(std::max<int64_t>(sizes[d], 0));
    if (__builtin_mul_overflow(count, extent, &count) || count >= kEnd) return false;
  }
  // The next placeholder starts on the next page past this one (the ctypes path's layout).
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, dtype_size(dtype), &bytes) || bytes >= kEnd) return false;
  const uint64_t span = (bytes / kAlign + 1) * kAlign;  // < 2^63 + 2^12: no overflow
  if (span >= kEnd - address_) return false;
  address_ += span;
  *out = view;
  return true;
}

}  // namespace kda::torch_op
