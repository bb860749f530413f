#pragma once
// A non-owning view of a strided tensor: the only way data enters or leaves the library.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kda {

// Values match the C ABI's KDA_DTYPE_* constants.
enum class DType : int32_t { f16 = 0, bf16 = 1, f32 = 2, i32 = 3, i64 = 4, f64 = 5 };

// Values match the C ABI's KDA_DEVICE_* constants.
enum class DeviceType : int32_t { cpu = 0, cuda = 1 };

struct Device {
  DeviceType type = DeviceType::cpu;
  int32_t index = 0;
  bool operator==(const Device& other) const { return type == other.type && index == other.index; }
};

inline constexpr int kMaxRank = 6;

std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
bool dtype_is_float(DType dtype);
std::string device_name(Device device);

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  int32_t rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};  // in elements, not bytes
  Device device{};

  // A view with row-major (contiguous) strides.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = {});

  // True when nothing was passed for an optional argument.
  bool empty_arg() const { return data == nullptr && rank == 0; }
  int64_t numel() const;
  // Row-major with no gaps (extents of 1 may have any stride); a view with no elements always is.
  bool is_contiguous() const;
  // Byte span [lo, hi) covered by the elements (for overlap checks); {0,0} when numel() == 0.
  std::pair<uintptr_t, uintptr_t> byte_span() const;
  // "[2, 128, 4, 64] bf16 cuda:0"
  std::string describe() const;
};

}  // namespace kda
