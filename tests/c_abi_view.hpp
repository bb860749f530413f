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

// Each operator's C problem from its C++ one, row by row of its table: a tensor's kda_tensor,
// an option's field(s).
#define KDA_TEST_OPTION_TO_C_KDA_TYPE_BOOL(member) c.member = p.member ? 1 : 0;
#define KDA_TEST_OPTION_TO_C_KDA_TYPE_INT(member) c.member = p.member;
#define KDA_TEST_OPTION_TO_C_KDA_TYPE_FLOAT_OR_NONE(member) \
  c.has_##member = p.member.has_value() ? 1 : 0;            \
  c.member = p.member.value_or(0.0);
#define KDA_TEST_COPY_TO_C(member, name, role, type, rank, rule, doc) \
  KDA_WHEN_TENSOR_##role(c.member = to_c(p.member);)                  \
      KDA_WHEN_OPTION_##role(KDA_TEST_OPTION_TO_C_##type(member))
#define KDA_TEST_TO_C(UP, op, Cxx, fla, spec)             \
  inline kda_##op##_problem to_c(const Cxx##Problem& p) { \
    kda_##op##_problem c{};                               \
    c.abi_version = KDA_ABI_VERSION;                      \
    KDA_##UP##_ARGS(KDA_TEST_COPY_TO_C) return c;         \
  }
KDA_OPS(KDA_TEST_TO_C)
#undef KDA_TEST_TO_C
#undef KDA_TEST_COPY_TO_C

}  // namespace kda::testing
