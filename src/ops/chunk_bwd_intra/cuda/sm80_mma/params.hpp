#pragma once
// The chunk_bwd_intra kernel's parameter block (raw pointers, 64-bit element strides, passed by
// value) and its shared-memory map. Plain C++ so that the host code filling them needs no CUDA
// headers.

#include <cstdint>

#include "cuda/common/views.hpp"

namespace kda::cuda::intra {

using cuda::ChunkLayout;

// A [B, T, heads, cols] tensor: element (b, t, head, col) at
// data[b * stride_batch + t * stride_token + head * stride_head + col * stride_col].
struct IntraRows {
  const void* data = nullptr;
  int64_t stride_batch = 0;
  int64_t stride_token = 0;
  int64_t stride_head = 0;
  int64_t stride_col = 0;
  // The widest asynchronous copy (16, 8 or 4 bytes) that every row of the tensor can be read
  // with: columns contiguous and every row start aligned to it. 0: read element by element.
  int copy_bytes = 0;
};

// A [B, T, heads] tensor (beta, db).
struct IntraColumn {
  const void* data = nullptr;
  int64_t stride_batch = 0;
  int64_t stride_token = 0;
  int64_t stride_head = 0;
};

// Where everything lives in dynamic shared memory, in bytes. One "stage" holds one work item's
// inputs: a work item is a unit (chunk, value head) and a pass over up to kMaxPassChannels of its
// channels (one pass for K <= 128, two for K <= 256). With two stages the next item's copies run
// while the current item computes.
struct IntraSmemLayout {
  static constexpr int kMaxPassChannels = 128;
  int pass_channels = 0;  // channels per pass: min(K rounded up to 32, 128)
  int passes = 0;         // ceil(K / pass_channels)
  int ld_g = 0;           // row pitch of G, in floats
  int ld_x = 0;           // row pitch of Q and Kk, in elements of X
  // Offsets inside a stage.
  int g_off = 0;     // G    [BT][ld_g]     float
  int q_off = 0;     // Q    [BT][ld_x]     X
  int k_off = 0;     // Kk   [BT][ld_x]     X
  int aq_off = 0;    // dAqk, lower part, packed per sub-chunk (see IntraTraits::a_offset)
  int ak_off = 0;    // dAkk, the same
  int beta_off = 0;  // β    [BT]           float
  int stage_bytes = 0;
  int stages = 0;  // 1 or 2
  // Offsets from the start of dynamic shared memory.
  int scratch_off = 0;  // per warp [16][32] float: the mma -> per-channel exchange
  int dbpart_off = 0;   // [8 channel groups][BT] float: db partial sums
  int units_off = 0;    // 2 resolved work units
  int total_bytes = 0;
};

// stages_request: 0 = as many as fit (2 when they do), 1 or 2 = that many (2 falls back to 1
// when it does not fit). `max_bytes`: the device's per-block dynamic shared-memory limit.
IntraSmemLayout make_intra_smem_layout(int chunk_size, int64_t K, int x_bytes, int warps,
                                       int stages_request, int max_bytes);

struct IntraParams {
  IntraRows q, k;        // [B, T, H, K]   X
  IntraRows g;           // [B, T, HV, K]  float32
  IntraRows dAqk, dAkk;  // [B, T, HV, BT] float32
  IntraRows dq, dk, dg;  // [B, T, HV, K]  float32, incoming
  IntraColumn beta;      // [B, T, HV]     X or float32 (beta_is_f32)
  IntraColumn db;        // [B, T, HV]     float32, incoming
  ChunkLayout chunks;    // fixed length or varlen, and the index tensors
  bool beta_is_f32 = false;
  bool l2_prefetch = true;  // prefetch the current item's incoming dq/dk/dg (and, with one
                            // stage, the next item's inputs) into L2

  // Outputs, contiguous row-major.
  float* dq_out = nullptr;  // [B, T, HV, K]
  float* dk_out = nullptr;  // [B, T, HV, K]
  float* dg_out = nullptr;  // [B, T, HV, K]
  float* db_out = nullptr;  // [B, T, HV]

  int64_t B = 0, T = 0, H = 0, HV = 0, K = 0;
  int64_t heads_per_group = 1;  // HV / H: value head hv reads query/key head hv / heads_per_group
  int64_t num_units = 0;        // chunks * HV
  IntraSmemLayout smem;
};

}  // namespace kda::cuda::intra
