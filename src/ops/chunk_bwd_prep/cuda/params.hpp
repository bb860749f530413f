#pragma once
// The chunk_bwd_prep kernel's parameter block: raw pointers, 64-bit element strides and sizes,
// passed by value. Plain C++, so the host code that fills it needs no CUDA headers. The fields
// for g, beta and the gate's options carry the epilogue's names: both kernels read them with
// the epilogue's tiles.cuh.

#include <cstdint>

#include "cuda/common/views.hpp"

namespace kda::cuda::prep {

struct PrepParams {
  TokenView q, k;    // [B, T, H, K] X, before l2norm
  TokenView v, do_;  // [B, T, HV, V] X
  TokenView g;       // [B, T, HV, K] X or float32 (g_is_f32)
  TokenView A, Aqk;  // [B, T, HV, BT] X: the forward's Akk and Aqk
  BetaView beta;     // [B, T, HV] X or float32
  ChunkLayout chunks;
  const float* A_log = nullptr;    // [HV]; null when absent
  const float* dt_bias = nullptr;  // [HV * K]; null when absent
  int64_t A_log_stride = 0;
  int64_t dt_bias_stride = 0;
  bool g_is_f32 = false;

  // Outputs, contiguous row-major [B, T, HV, K] (gk, w, qg, kg) and [B, T, HV, V] (u, dv).
  float* gk = nullptr;
  void* w = nullptr;
  void* u = nullptr;
  void* qg = nullptr;
  void* kg = nullptr;
  void* dv = nullptr;

  int64_t B = 0, T = 0, H = 0, HV = 0, K = 0, V = 0;
  int64_t heads_per_group = 1;  // HV / H
  int64_t num_chunks = 0;  // chunks in all (B * NT, or NT when varlen); the grid is chunks * HV
  int chunk_size = 64;
  bool l2norm = false;          // use_qk_l2norm_in_kernel
  bool gate_in_kernel = false;  // use_gate_in_kernel
  bool beta_sigmoid = false;    // use_beta_sigmoid_in_kernel
  bool neg_eigval = false;      // allow_neg_eigval
  bool has_lower_bound = false;
  float lower_bound = 0.0f;
};

}  // namespace kda::cuda::prep
