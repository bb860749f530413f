#include "core/index_tensor.hpp"

namespace kda {

std::vector<int64_t> read_index_tensor(const TensorView& t) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(t.numel()));
  const int64_t cols = t.rank == 2 ? t.shape[1] : 1;
  for (int64_t r = 0; r < t.shape[0]; ++r) {
    for (int64_t c = 0; c < cols; ++c) out.push_back(index_at(t, r, c));
  }
  return out;
}

}  // namespace kda
