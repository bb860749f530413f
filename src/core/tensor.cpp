#include "kda/tensor.hpp"

#include <sstream>

namespace kda {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::i64:
    case DType::f64:
      return 8;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
    case DType::f32:
      return "float32";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
    case DType::f64:
      return "float64";
  }
  return "unknown-dtype";
}

bool dtype_is_float(DType dtype) {
  return dtype == DType::f16 || dtype == DType::bf16 || dtype == DType::f32 || dtype == DType::f64;
}

std::string device_name(Device device) {
  if (device.type == DeviceType::cpu) return "cpu";
  if (device.type == DeviceType::cuda) return "cuda:" + std::to_string(device.index);
  return "unknown-device";
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t extent : shape) t.shape[i++] = extent;
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

bool TensorView::is_contiguous() const {
  // A view without elements addresses nothing, so every stride describes it: NumPy gives empty
  // arrays zero strides and PyTorch products of max(extent, 1), and both call them contiguous.
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 0) return true;
  }
  int64_t expected = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    // Also called on unvalidated views (describe()): a view of more than 2^63 - 1 elements is
    // not one the library can address, contiguous or not.
    if (__builtin_mul_overflow(expected, shape[d], &expected)) return false;
  }
  return true;
}

std::pair<uintptr_t, uintptr_t> TensorView::byte_span() const {
  if (numel() == 0 || data == nullptr) return {0, 0};
  int64_t last = 0;
  for (int d = 0; d < rank; ++d) last += (shape[d] - 1) * strides[d];
  const auto lo = reinterpret_cast<uintptr_t>(data);
  return {lo, lo + static_cast<uintptr_t>(last + 1) * dtype_size(dtype)};
}

std::string TensorView::describe() const {
  std::ostringstream os;
  os << "[";
  for (int d = 0; d < rank; ++d) os << (d ? ", " : "") << shape[d];
  os << "] " << dtype_name(dtype) << " " << device_name(device);
  if (rank > 0 && !is_contiguous()) {
    os << " strides [";
    for (int d = 0; d < rank; ++d) os << (d ? ", " : "") << strides[d];
    os << "]";
  }
  return os.str();
}

}  // namespace kda
