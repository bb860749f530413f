#pragma once
// The C ABI's view (kda_tensor, kda_problem) of the C++ types, for the tests and the fuzzers
// that drive both faces of the library with one problem. Header-only, no test framework.

#include <cstdint>

#include "kda/kda.h"
#include "kda/kda.hpp"

namespace kda::testing {

// The C ABI's view of a C++ tensor view and problem.
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

inline kda_problem to_c(const Problem& p) {
  kda_problem c{};
  c.abi_version = KDA_ABI_VERSION;
  c.state_v_first = p.state_v_first ? 1 : 0;
  c.chunk_size = p.chunk_size;
  c.has_scale = p.scale.has_value() ? 1 : 0;
  c.scale = p.scale.value_or(0.0);
  c.q = to_c(p.q);
  c.k = to_c(p.k);
  c.v = to_c(p.v);
  c.v_new = to_c(p.v_new);
  c.g = to_c(p.g);
  c.beta = to_c(p.beta);
  c.A = to_c(p.A);
  c.h = to_c(p.h);
  c.do_ = to_c(p.do_);
  c.dh = to_c(p.dh);
  c.dv = to_c(p.dv);
  c.cu_seqlens = to_c(p.cu_seqlens);
  c.chunk_indices = to_c(p.chunk_indices);
  c.dq = to_c(p.dq);
  c.dk = to_c(p.dk);
  c.dv_out = to_c(p.dv_out);
  c.db = to_c(p.db);
  c.dg = to_c(p.dg);
  c.dA = to_c(p.dA);
  return c;
}

}  // namespace kda::testing
