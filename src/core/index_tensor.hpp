#pragma once
// Reads a host-resident int32/int64 index tensor (cu_seqlens, chunk_indices) into int64s.

#include <cstdint>
#include <vector>

#include "kda/tensor.hpp"

namespace kda {

// Row-major order over the view's shape, honouring its strides. The view must be on the host,
// int32 or int64, rank 1 or 2 (validated by the caller).
std::vector<int64_t> read_index_tensor(const TensorView& t);

}  // namespace kda
