#pragma once
// The chunk_bwd_wy_dqkg kernels' parameter block: raw pointers, 64-bit element strides and sizes,
// passed by value to the kernel. Plain C++ so the host code that fills it needs no CUDA headers.

#include <cstdint>

#include "cuda/common/tensor_map.hpp"
#include "cuda/common/views.hpp"

namespace kda::cuda {

struct WyDqkgParams {
  TokenView q, k;               // [B, T, H, K]  X
  TokenView v, v_new, do_, dv;  // [B, T, HV, V] X
  TokenView g;                  // [B, T, HV, K] f32
  TokenView A;                  // [B, T, HV, BT] X
  BetaView beta;                // [B, T, HV]
  StateView h, dh;              // [B, NT, HV, K, V] (strides as S[k][v])
  ChunkLayout chunks;           // fixed length or varlen, and the index tensors

  // Outputs, contiguous row-major.
  float* dq = nullptr;     // [B, T, HV, K]
  float* dk = nullptr;     // [B, T, HV, K]
  float* dg = nullptr;     // [B, T, HV, K]
  void* dv_out = nullptr;  // [B, T, HV, V] X
  float* db = nullptr;     // [B, T, HV]
  float* dA = nullptr;     // [B, T, HV, BT]

  int64_t B = 0, T = 0, H = 0, HV = 0, K = 0, V = 0;
  int64_t heads_per_group = 1;  // HV / H: value head hv reads query/key head hv / heads_per_group
  int64_t num_units = 0;        // work units = chunks * HV, one CTA each
  float scale = 1.0f;
  // Float32 h stored [K][V] at BT <= 32: h and dh as rank-4 maps [B*NT][HV][K][V] (batch and
  // chunk flattened, h_nt chunks per batch row) for boxes of one slab (16 k x V), copied into the
  // staging slot by one thread's bulk tensor copies. h_maps_ok false: cp.async by every thread.
  bool h_maps_ok = false;
  int64_t h_nt = 0;
  TensorMapBytes h_map, dh_map;
};

}  // namespace kda::cuda
