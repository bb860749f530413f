// chunk_bwd_wy_dqkg's C ABI entries (kda/ops/chunk_bwd_wy_dqkg.h) and its C argument table.

#include <cstddef>

#include "core/c_api_support.hpp"
#include "kda/kda.h"
#include "kda/ops/chunk_bwd_wy_dqkg.hpp"

namespace kda::c_api {

namespace {

using CP = kda_chunk_bwd_wy_dqkg_problem;
constexpr CArg kArgs[] = {KDA_CHUNK_BWD_WY_DQKG_ARGS(KDA_MAKE_C_ARG)};

}  // namespace

extern const COpInfo kChunkBwdWyDqkgC = {ChunkBwdWyDqkgProblem::kName, kArgs, sizeof(CP)};

namespace {

Status to_problem(const CP* in, ChunkBwdWyDqkgProblem* p) {
  if (Status s = check_abi_version("problem", in, in ? in->abi_version : 0); !s.ok()) return s;
  if (Status s = to_tensors(in, std::span<const CArg>(kArgs), ChunkBwdWyDqkgProblem::args(), p);
      !s.ok()) {
    return s;
  }
  if (in->has_scale) p->scale = in->scale;
  p->chunk_size = in->chunk_size;
  p->state_v_first = in->state_v_first != 0;
  return Status::Ok();
}

}  // namespace

}  // namespace kda::c_api

extern "C" {

kda_status kda_chunk_bwd_wy_dqkg_validate(const kda_chunk_bwd_wy_dqkg_problem* problem) {
  return kda::c_api::validate_entry<kda::ChunkBwdWyDqkgProblem>(problem, kda::c_api::to_problem);
}

kda_status kda_chunk_bwd_wy_dqkg_run(const kda_chunk_bwd_wy_dqkg_problem* problem, int32_t backend,
                                     int32_t kernel, void* stream) {
  return kda::c_api::run_entry<kda::ChunkBwdWyDqkgProblem>(problem, backend, kernel, stream,
                                                           kda::c_api::to_problem);
}

}  // extern "C"
