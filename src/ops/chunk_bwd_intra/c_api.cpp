// chunk_bwd_intra's C ABI entries (kda/ops/chunk_bwd_intra.h) and its C argument table.

#include <cstddef>

#include "core/c_api_support.hpp"
#include "kda/kda.h"
#include "kda/ops/chunk_bwd_intra.hpp"

namespace kda::c_api {

namespace {

using CP = kda_chunk_bwd_intra_problem;
constexpr CArg kArgs[] = {KDA_CHUNK_BWD_INTRA_ARGS(KDA_MAKE_C_ARG)};

}  // namespace

extern const COpInfo kChunkBwdIntraC = {ChunkBwdIntraProblem::kName, kArgs, sizeof(CP)};

namespace {

Status to_problem(const CP* in, ChunkBwdIntraProblem* p) {
  if (Status s = check_abi_version("problem", in, in ? in->abi_version : 0); !s.ok()) return s;
  if (Status s = to_tensors(in, std::span<const CArg>(kArgs), ChunkBwdIntraProblem::args(), p);
      !s.ok()) {
    return s;
  }
  p->chunk_size = in->chunk_size;
  p->safe_gate = in->safe_gate != 0;
  return Status::Ok();
}

}  // namespace

}  // namespace kda::c_api

extern "C" {

kda_status kda_chunk_bwd_intra_validate(const kda_chunk_bwd_intra_problem* problem) {
  return kda::c_api::validate_entry<kda::ChunkBwdIntraProblem>(problem, kda::c_api::to_problem);
}

kda_status kda_chunk_bwd_intra_run(const kda_chunk_bwd_intra_problem* problem, int32_t backend,
                                   int32_t kernel, void* stream) {
  return kda::c_api::run_entry<kda::ChunkBwdIntraProblem>(problem, backend, kernel, stream,
                                                          kda::c_api::to_problem);
}

}  // extern "C"
