#pragma once
// The C ABI's view (kda_tensor, the operators' C problem structs) of the C++ types, for the tests
// and the fuzzers that drive both faces of the library with one problem. Header-only, no test
// framework. The tensors go by the operators' argument tables (the same X-macro lists both).

#include <cstdint>

#include "kda/kda.h"
#include "kda/kda.hpp"

namespace kda::testing {

// The C ABI's view of a C++ tensor view.
inline kda_tensor to_c(const TensorView& t) {
  kda_tensor c{};
  c.data = t.data;
  c.dtype = static_cast<int32_t>(t.dtype);
  c.rank = t.rank;
  c.device_type = static_cast<int32_t>(t.device.type);
  c.device_index = t.device.index;
  for (int d = 0; d < kMaxRank; ++d) {
    c.shape[d] = t.shape[d];
    c.strides[d] = t.strides[d];
  }
  return c;
}

#define KDA_TEST_COPY_TO_C(member, name, role, rank, doc) c.member = to_c(p.member);

inline kda_chunk_bwd_wy_dqkg_problem to_c(const ChunkBwdWyDqkgProblem& p) {
  kda_chunk_bwd_wy_dqkg_problem c{};
  c.abi_version = KDA_ABI_VERSION;
  c.state_v_first = p.state_v_first ? 1 : 0;
  c.chunk_size = p.chunk_size;
  c.has_scale = p.scale.has_value() ? 1 : 0;
  c.scale = p.scale.value_or(0.0);
  KDA_CHUNK_BWD_WY_DQKG_ARGS(KDA_TEST_COPY_TO_C)
  return c;
}

inline kda_chunk_bwd_intra_problem to_c(const ChunkBwdIntraProblem& p) {
  kda_chunk_bwd_intra_problem c{};
  c.abi_version = KDA_ABI_VERSION;
  c.safe_gate = p.safe_gate ? 1 : 0;
  c.chunk_size = p.chunk_size;
  KDA_CHUNK_BWD_INTRA_ARGS(KDA_TEST_COPY_TO_C)
  return c;
}

#undef KDA_TEST_COPY_TO_C

}  // namespace kda::testing
