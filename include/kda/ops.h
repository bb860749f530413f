/* The operators of libkda: the one list every registry is built from (the C ABI's codes,
 * declarations and tables, kda::run, the tooling's and the command line's registries, the torch
 * ops, the build's source folders, Python's tables). A new operator is one #include of its table
 * and one row here:
 *   X(UP, op, Cxx, fla_name, spec)
 *   UP        upper-case name: KDA_OP_<UP> is its code, KDA_<UP>_ARGS its table
 *   op        its name: kda_<op>_problem and kda_<op>_run, src/ops/<op>/, `kda run <op>`
 *   Cxx       the C++ prefix: kda::<Cxx>Problem, kda::<Cxx>Dims
 *   fla_name  fla's function name: the Python function, the torch op and fla's dispatch
 *   spec      the contract, a file of ../shared */
#ifndef KDA_OPS_H_
#define KDA_OPS_H_

#include "kda/ops/chunk_bwd_intra_args.h"
#include "kda/ops/chunk_bwd_wy_dqkg_args.h"

/* clang-format off */
#define KDA_OPS(X)                                                                              \
  X(CHUNK_BWD_WY_DQKG, chunk_bwd_wy_dqkg, ChunkBwdWyDqkg, "chunk_kda_bwd_wy_dqkg_fused", "SPEC.md") \
  X(CHUNK_BWD_INTRA, chunk_bwd_intra, ChunkBwdIntra, "chunk_kda_bwd_intra", "SPEC-chunk-bwd-intra.md")
/* clang-format on */

#endif /* KDA_OPS_H_ */
