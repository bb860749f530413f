#pragma once
// The chunk_bwd_epilogue kernels' parameter block and shared-memory plan: raw pointers, 64-bit
// element strides and sizes, passed by value. Plain C++, so the host code that fills it needs no
// CUDA headers.

#include <cstdint>

#include "cuda/common/views.hpp"

namespace kda::cuda::epilogue {

// Where each tile of one CTA lives in its dynamic shared memory (float offsets). Tiles of a chunk's
// rows have L rows: the L x 32 blocks (pitch kBlockPitch) of every K- or V-wide tensor, the L x L
// matrices (pitch L + 4) and the accumulators of dq and dk across value heads (L x (K rounded up
// to 32), pitch + 4). The first pass over V blocks (phase A: dAqk, dAkk, dv) and the pass over K
// blocks (phase B: the WY and intra-chunk terms) share one region.
struct SmemPlan {
  static constexpr int kBlockPitch = 36;
  int ld_k = 0;  // pitch of the dq, dk accumulators and of KG
  int ld_l = 0;  // pitch of the L x L matrices
  // Kept for the whole unit or value head.
  int dq_acc = 0, dk_acc = 0, akk = 0, pq = 0, pk = 0;
  int beta = 0, d_beta_raw = 0, db = 0, q_inv = 0, k_inv = 0, col_part = 0, s_dot = 0;
  // Phase A (pass over V blocks): KG [L][ld_k], the blocks of do, v_new, dv, v (then U), dvb, a
  // 32 x 32 block of h; Akkᵀ X aliases the do and v_new blocks.
  int a_kg = 0, a_do = 0, a_vn = 0, a_dv = 0, a_u = 0, a_t = 0, a_s = 0;
  // Phase B (pass over K blocks): G, q̂, k̂ blocks; per V block do, v_new, dv, h and dh blocks;
  // the products dq, dk0, dw. dkgb aliases the do block and dg the v_new block after the V loop.
  int b_g = 0, b_q = 0, b_k = 0, b_do = 0, b_vn = 0, b_dv = 0, b_s = 0, b_ds = 0;
  int b_dq = 0, b_dk0 = 0, b_dw = 0;
  int total_floats = 0;
  int total_bytes() const { return total_floats * 4; }
};

inline SmemPlan make_smem_plan(int L, int64_t K) {
  SmemPlan s;
  const int k_blocks = static_cast<int>((K + 31) / 32);
  s.ld_k = 32 * k_blocks + 4;
  s.ld_l = L + 4;
  int at = 0;
  const auto take = [&](int floats) {
    const int offset = at;
    at += (floats + 3) / 4 * 4;  // 16-byte aligned
    return offset;
  };
  const int block = L * SmemPlan::kBlockPitch;
  const int square = L * s.ld_l;
  s.dq_acc = take(L * s.ld_k);
  s.dk_acc = take(L * s.ld_k);
  s.akk = take(square);
  s.pq = take(square);
  s.pk = take(square);
  s.beta = take(L);
  s.d_beta_raw = take(L);
  s.db = take(L);
  s.q_inv = take(L);
  s.k_inv = take(L);
  s.col_part = take(8 * 32);
  s.s_dot = take(32);
  const int region = at;
  s.a_kg = take(L * s.ld_k);
  s.a_do = take(block);
  s.a_vn = take(block);
  s.a_dv = take(block);
  s.a_u = take(block);
  s.a_t = take(block);
  s.a_s = take(32 * SmemPlan::kBlockPitch);
  const int end_a = at;
  at = region;
  s.b_g = take(block);
  s.b_q = take(block);
  s.b_k = take(block);
  s.b_do = take(block);
  s.b_vn = take(block);
  s.b_dv = take(block);
  s.b_s = take(32 * SmemPlan::kBlockPitch);
  s.b_ds = take(32 * SmemPlan::kBlockPitch);
  s.b_dq = take(block);
  s.b_dk0 = take(block);
  s.b_dw = take(block);
  s.total_floats = at > end_a ? at : end_a;
  return s;
}

struct EpilogueParams {
  TokenView q, k;               // [B, T, H, K] X, before l2norm
  TokenView v, do_, v_new, dv;  // [B, T, HV, V] X
  TokenView g;                  // [B, T, HV, K] X or float32 (g_is_f32)
  TokenView A;                  // [B, T, HV, BT] X: the forward's Akk
  BetaView beta;                // [B, T, HV] X or float32
  StateView h, dh;              // [B, NT, HV, ..] as S[k][v]; X or float32 (h_is_f32)
  ChunkLayout chunks;
  const float* A_log = nullptr;    // [HV]; null when absent
  const float* dt_bias = nullptr;  // [HV * K]; null when absent
  int64_t A_log_stride = 0;
  int64_t dt_bias_stride = 0;
  bool g_is_f32 = false;
  bool h_is_f32 = false;

  // Outputs, contiguous row-major.
  void* dq = nullptr;         // [B, T, H, K] X
  void* dk = nullptr;         // [B, T, H, K] X
  void* dv_out = nullptr;     // [B, T, HV, V] X
  float* dg = nullptr;        // [B, T, HV, K]
  float* dbeta = nullptr;     // [B, T, HV]
  float* dA_log = nullptr;    // [HV]
  float* ddt_bias = nullptr;  // [HV, K]

  int64_t B = 0, T = 0, H = 0, HV = 0, K = 0, V = 0;
  int64_t heads_per_group = 1;  // HV / H
  int64_t num_chunks = 0;       // chunks in all (B * NT, or NT when varlen); the grid is chunks * H
  int chunk_size = 64;
  float scale = 1.0f;
  bool l2norm = false;          // use_qk_l2norm_in_kernel
  bool gate_in_kernel = false;  // use_gate_in_kernel
  bool beta_sigmoid = false;    // use_beta_sigmoid_in_kernel
  bool neg_eigval = false;      // allow_neg_eigval
  bool has_lower_bound = false;
  float lower_bound = 0.0f;
  SmemPlan smem;  // make_smem_plan(chunk_size, K)
};

}  // namespace kda::cuda::epilogue
