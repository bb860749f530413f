// Fills IntraParams: the views of every tensor (with their rows' copy widths), the bulk-copy
// tensor maps, the flags; and the shared-memory map the launcher adds.

#include <cstdint>

#include "cuda/common/token_tile_map.hpp"
#include "ops/chunk_bwd_intra/cuda/make_params.hpp"

namespace kda::cuda::intra {

namespace {

// The bulk-copy maps of IntraParams::maps (the tiles, and the incoming dq, dk, dg for their L2
// prefetch). Sets tma_copies when every one encoded.
void encode_maps(const ChunkBwdIntraProblem& problem, const ChunkBwdIntraDims& dims,
                 IntraParams* p) {
  const int bt = static_cast<int>(dims.BT);
  const IntraStageMap map = intra_stage_map(bt, static_cast<int>(dtype_size(problem.q.dtype)));
  constexpr int kPass = IntraSmemLayout::kMaxPassChannels;
  bool ok = encode_token_rows_map(&p->maps.q, problem.q, bt, map.ld_x) &&
            encode_token_rows_map(&p->maps.k, problem.k, bt, map.ld_x) &&
            encode_token_rows_map(&p->maps.g, problem.g, bt, map.ld_g) &&
            encode_token_rows_map(&p->maps.dq, problem.dq, bt, kPass) &&
            encode_token_rows_map(&p->maps.dk, problem.dk, bt, kPass) &&
            encode_token_rows_map(&p->maps.dg, problem.dg, bt, kPass);
  for (int s = 0; ok && s < bt / 16; ++s) {
    ok = encode_token_rows_map(&p->maps.dAqk[s], problem.dAqk, 16, intra_a_ld(s)) &&
         encode_token_rows_map(&p->maps.dAkk[s], problem.dAkk, 16, intra_a_ld(s));
  }
  p->tma_copies = ok;
}

}  // namespace

IntraSmemLayout make_intra_smem_layout(int chunk_size, int64_t K, int x_bytes, int warps,
                                       int stages_request, int max_bytes) {
  IntraSmemLayout l;
  l.pass_channels = IntraSmemLayout::kMaxPassChannels;
  l.passes = static_cast<int>((K + l.pass_channels - 1) / l.pass_channels);
  l.stage = intra_stage_map(chunk_size, x_bytes);
  l.stage_bytes = l.stage.bytes;
  constexpr int kMaxGroups = 8;
  constexpr int kUnitsBytes = 128;                           // 3 IntraUnit (checked in kernel.cuh)
  constexpr int kBarriersBytes = 16;                         // 2 shared-memory barriers
  const int dbpart_bytes = 2 * kMaxGroups * chunk_size * 4;  // two units' partials
  const int fixed = warps * 16 * 32 * 4 + dbpart_bytes + kUnitsBytes + kBarriersBytes;
  l.stages = stages_request != 1 && 2 * l.stage_bytes + fixed <= max_bytes ? 2 : 1;
  l.scratch_off = l.stages * l.stage_bytes;
  l.dbpart_off = l.scratch_off + warps * 16 * 32 * 4;
  l.units_off = l.dbpart_off + dbpart_bytes;
  l.barriers_off = l.units_off + kUnitsBytes;
  l.total_bytes = l.barriers_off + kBarriersBytes;
  return l;
}

IntraParams make_intra_params(const ChunkBwdIntraProblem& problem, const ChunkBwdIntraDims& dims,
                              const IntraVariant& variant) {
  IntraParams p;
  p.q = token_copy_view(problem.q);
  p.k = token_copy_view(problem.k);
  p.g = token_copy_view(problem.g);
  p.dAqk = token_copy_view(problem.dAqk);
  p.dAkk = token_copy_view(problem.dAkk);
  p.dq = token_copy_view(problem.dq);
  p.dk = token_copy_view(problem.dk);
  p.dg = token_copy_view(problem.dg);
  p.beta = column_view(problem.beta);
  p.db = column_view(problem.db);
  p.beta_is_f32 = problem.beta.dtype == DType::f32;
  p.fast_copies = true;
  for (const TokenCopyView* t : {&p.q, &p.k, &p.g, &p.dAqk, &p.dAkk}) {
    p.fast_copies = p.fast_copies && t->copy_bytes == 16;
  }
  p.fast_prefetch = p.dq.stride_col == 1 && p.dk.stride_col == 1 && p.dg.stride_col == 1;
  p.chunks =
      chunk_layout(problem.cu_seqlens, problem.chunk_indices, dims.T, dims.NT, dims.num_seqs);
  p.dq_out = static_cast<float*>(problem.dq_out.data);
  p.dk_out = static_cast<float*>(problem.dk_out.data);
  p.dg_out = static_cast<float*>(problem.dg_out.data);
  p.db_out = static_cast<float*>(problem.db_out.data);
  p.B = dims.B;
  p.T = dims.T;
  p.H = dims.H;
  p.HV = dims.HV;
  p.K = dims.K;
  p.heads_per_group = dims.HV / dims.H;
  p.num_units = (dims.varlen ? dims.NT : dims.B * dims.NT) * dims.HV;
  if (variant.tma != 0 && variant.fast_paths) encode_maps(problem, dims, &p);
  p.diag_tc = problem.safe_gate && variant.diag == 0;
  return p;
}

}  // namespace kda::cuda::intra
