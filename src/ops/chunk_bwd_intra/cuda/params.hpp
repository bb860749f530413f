#pragma once
// The chunk_bwd_intra kernels' parameter block (the views of cuda/common/views.hpp: raw pointers,
// 64-bit element strides; passed by value) and its shared-memory map. Plain C++ so that the host
// code filling them needs no CUDA headers.

#include <cstdint>

#include "cuda/common/tensor_map.hpp"
#include "cuda/common/views.hpp"

namespace kda::cuda::intra {

// One stage's map (bytes from the stage's start), fixed per (chunk size, X): every pass is laid
// out for kMaxPassChannels channels whatever K is, so that the kernel's shared-memory addresses
// are compile-time offsets (a run-time pitch cost an integer multiply-add per access: ncu found
// integer address arithmetic the largest part of the kernel's instructions). Pitches: G's 8 (mod
// 32) floats and Q/Kk's 8 or 24 (mod 32) words make the mma operand reads (4 rows x 8 channels
// per instruction) free of bank conflicts. Every tile starts on a 128-byte boundary (and a stage's
// size is a multiple of 128), as the bulk tensor copies require.
struct IntraStageMap {
  int ld_g;      // row pitch of G, in floats
  int ld_x;      // row pitch of Q and Kk, in elements of X
  int g_off;     // G    [BT][ld_g]     float
  int q_off;     // Q    [BT][ld_x]     X
  int k_off;     // Kk   [BT][ld_x]     X
  int aq_off;    // dAqk, lower part, packed per sub-chunk (see IntraTraits::a_offset)
  int ak_off;    // dAkk, the same
  int beta_off;  // β    [BT]           float
  int bytes;
};

constexpr int kIntraMaxPassChannels = 128;

// dA in shared memory: row i of sub-chunk s keeps columns 0 .. 16(s+1)-1 (the lower part and the
// diagonal block) with pitch intra_a_ld(s) floats; sub-chunk s starts at intra_a_offset(s) floats
// (a multiple of 32: 128-byte aligned). The pitch is 4 (mod 16): the mma A-fragment reads of 8
// rows x 4 columns hit 32 distinct banks.
constexpr int intra_a_ld(int s) {
  return 16 * (s + 1) + 4;
}
constexpr int intra_a_offset(int s) {
  return 128 * s * (s + 1) + 64 * s;
}

constexpr IntraStageMap intra_stage_map(int chunk_size, int x_bytes) {
  const int channels = kIntraMaxPassChannels;
  const int nc = chunk_size / 16;
  const int a_floats = intra_a_offset(nc);
  auto align128 = [](int bytes) { return (bytes + 127) / 128 * 128; };
  IntraStageMap m{};
  m.ld_g = channels + 8;
  m.ld_x = channels + (x_bytes == 2 ? 16 : 8);
  m.g_off = 0;
  m.q_off = align128(m.g_off + chunk_size * m.ld_g * 4);
  m.k_off = align128(m.q_off + chunk_size * m.ld_x * x_bytes);
  m.aq_off = align128(m.k_off + chunk_size * m.ld_x * x_bytes);
  m.ak_off = align128(m.aq_off + a_floats * 4);
  m.beta_off = align128(m.ak_off + a_floats * 4);
  m.bytes = align128(m.beta_off + chunk_size * 4);
  return m;
}

// Where everything lives in dynamic shared memory, in bytes. One "stage" holds one work item's
// inputs: a work item is a unit (chunk, value head) and a pass over up to kMaxPassChannels of its
// channels (one pass for K <= 128, two for K <= 256). With two stages the next item's copies run
// while the current item computes.
struct IntraSmemLayout {
  static constexpr int kMaxPassChannels = kIntraMaxPassChannels;
  int pass_channels = 0;  // channels per pass: kMaxPassChannels (a pass may use fewer)
  int passes = 0;         // ceil(K / pass_channels)
  IntraStageMap stage{};  // = intra_stage_map(BT, sizeof(X)): the kernel uses its constants
  int stage_bytes = 0;
  int stages = 0;  // 1 or 2
  // Offsets from the start of dynamic shared memory.
  int scratch_off = 0;   // per warp [16][32] float: the mma -> per-channel exchange
  int dbpart_off = 0;    // [2 units][8 channel groups][BT] float: db partial sums
  int units_off = 0;     // 3 resolved work units (128 bytes)
  int barriers_off = 0;  // 2 shared-memory barriers (uint64), one per stage: its bulk copies
  int total_bytes = 0;
};

// stages_request: 0 = as many as fit (2 when they do), 1 or 2 = that many (2 falls back to 1
// when it does not fit). `max_bytes`: the device's per-block dynamic shared-memory limit.
IntraSmemLayout make_intra_smem_layout(int chunk_size, int64_t K, int x_bytes, int warps,
                                       int stages_request, int max_bytes);

struct IntraParams {
  TokenCopyView q, k;        // [B, T, H, K]   X
  TokenCopyView g;           // [B, T, HV, K]  float32
  TokenCopyView dAqk, dAkk;  // [B, T, HV, BT] float32
  TokenCopyView dq, dk, dg;  // [B, T, HV, K]  float32, incoming
  ColumnView beta;           // [B, T, HV]     X or float32 (beta_is_f32)
  ColumnView db;             // [B, T, HV]     float32, incoming
  ChunkLayout chunks;        // fixed length or varlen, and the index tensors
  // beta's dtype, kept out of the view (not a BetaView): its byte inside the view moved the
  // members after it, and the kernels' code changed with them (dev/sass-compare.py).
  bool beta_is_f32 = false;
  bool l2_prefetch = true;  // prefetch the current item's incoming dq/dk/dg (and, with one
                            // stage, the next item's inputs) into L2
  // Every row of q, k, g, dAqk, dAkk can be copied in 16-byte pieces (copy_bytes == 16): the
  // copies then take the kernel's compile-time-shaped path (a few instructions per piece)
  // instead of the general one (any stride, any alignment).
  bool fast_copies = false;
  // dq, dk, dg (incoming) have unit column strides: their L2 prefetch takes the short path.
  bool fast_prefetch = false;
  // Bulk tensor copies (TMA): one elected thread copies each tile of an item with one request
  // (q, k, g: one box of the stage's rows; dAqk, dAkk: one box per sub-chunk), completing on the
  // stage's shared-memory barrier; rows past the chunk are zeroed by the threads when the chunk is
  // short; the incoming dq, dk, dg boxes of an item are prefetched to L2 by three bulk requests.
  // Set when every map below encoded (16-byte aligned data and strides, unit column strides) and
  // the variant asks for it; the launcher then picks a bulk-copy kernel.
  bool tma_copies = false;
  // safe_gate's bounded gate (and the variant allows it): the diagonal 16 x 16 blocks go through
  // the tensor cores, factored through anchor rows (IntraTraits::kDiagTc). Taken by the TF32
  // bulk-copy kernels; the others compute the diagonal blocks exactly whatever it says.
  bool diag_tc = false;
  // Coordinates (innermost first): (channel, head, token, batch).
  struct Maps {
    TensorMapBytes q, k, g;           // box [1][BT][1][ld_x | ld_g] at (ch0, head, t0, batch)
    TensorMapBytes dAqk[4], dAkk[4];  // [s]: box [1][16][1][a_ld(s)] at (0, hv, t0 + 16 s, b)
    TensorMapBytes dq, dk, dg;        // box [1][BT][1][128] at (ch0, hv, t0, batch)
  } maps;

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
