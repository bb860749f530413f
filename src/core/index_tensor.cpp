#include "core/index_tensor.hpp"

namespace kda {

std::vector<int64_t> read_index_tensor(const TensorView& t) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(t.numel()));
  const int64_t rows = t.shape[0];
  const int64_t cols = t.rank == 2 ? t.shape[1] : 1;
  const int64_t col_stride = t.rank == 2 ? t.strides[1] : 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t off = r * t.strides[0] + c * col_stride;
      out.push_back(t.dtype == DType::i32 ? static_cast<const int32_t*>(t.data)[off]
                                          : static_cast<const int64_t*>(t.data)[off]);
    }
  }
  return out;
}

}  // namespace kda
