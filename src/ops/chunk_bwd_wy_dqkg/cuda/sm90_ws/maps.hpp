#pragma once
// The bulk-copy tensor maps of the sm90_ws kernel (v3), one per input it stages, encoded on the
// host (dispatch.cu) and passed as a second __grid_constant__ parameter. Plain C++.

#include "cuda/common/tensor_map.hpp"

namespace kda::cuda {

struct WyDqkgMaps {
  // Token tensors as rank-4 maps [1][B*T][heads][cols] (batch and time flattened): boxes of
  // 64 rows x 128 bytes of columns, 128-byte swizzled (the layout wgmma's descriptors read).
  TensorMapBytes q, k, v, v_new, do_, dv, g, A;
  // h, dh as [B*NT][HV][K][V]: boxes of 128 k x 128 bytes of v (32 float32 or 64 16-bit values).
  TensorMapBytes h, dh;
  int64_t h_nt = 0;  // chunks per batch row of h (its dimension 1)
};

}  // namespace kda::cuda
