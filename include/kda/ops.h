/* The operators of libkda: the one list every registry is built from (the C ABI's codes,
 * declarations and tables, kda::run, the tooling's and the command line's registries, the torch
 * ops, the build's source folders, Python's tables). A new operator is one #include of its table
 * and one row at the end here (a row's position is its code KDA_OP_<UP>, which the C ABI keeps
 * stable):
 *   X(UP, op, Cxx, fla_name, spec)
 *   UP        upper-case name: KDA_OP_<UP> is its code, KDA_<UP>_ARGS its table
 *   op        its name: kda_<op>_problem and kda_<op>_run, src/ops/<op>/, `kda run <op>`
 *   Cxx       the C++ prefix: kda::<Cxx>Problem, kda::<Cxx>Dims
 *   fla_name  the Python function's and the torch op's name: fla's name for the function where
 *             fla has one (then kda_kernels.fla serves fla's dispatch of it), else one of ours
 *   spec      the contract, a file of ../shared */
#ifndef KDA_OPS_H_
#define KDA_OPS_H_

#include "kda/ops/chunk_bwd_dhu_args.h"
#include "kda/ops/chunk_bwd_epilogue_args.h"
#include "kda/ops/chunk_bwd_intra_args.h"
#include "kda/ops/chunk_bwd_prep_args.h"
#include "kda/ops/chunk_bwd_wy_dqkg_args.h"
#include "kda/ops/chunk_fwd_h_args.h"

/* clang-format off */
#define KDA_OPS(X)                                                                              \
  X(CHUNK_BWD_WY_DQKG, chunk_bwd_wy_dqkg, ChunkBwdWyDqkg, "chunk_kda_bwd_wy_dqkg_fused", "SPEC.md") \
  X(CHUNK_BWD_INTRA, chunk_bwd_intra, ChunkBwdIntra, "chunk_kda_bwd_intra", "SPEC-chunk-bwd-intra.md") \
  X(CHUNK_BWD_EPILOGUE, chunk_bwd_epilogue, ChunkBwdEpilogue, "chunk_kda_bwd_epilogue", "docs/design.md") \
  X(CHUNK_BWD_DHU, chunk_bwd_dhu, ChunkBwdDhu, "chunk_gated_delta_rule_bwd_dhu", "docs/design.md") \
  X(CHUNK_FWD_H, chunk_fwd_h, ChunkFwdH, "chunk_gated_delta_rule_fwd_h", "docs/design.md") \
  X(CHUNK_BWD_PREP, chunk_bwd_prep, ChunkBwdPrep, "chunk_kda_bwd_prep", "docs/design.md")
/* clang-format on */

#endif /* KDA_OPS_H_ */
