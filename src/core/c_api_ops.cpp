// The C ABI's per-operator part, for every operator of kda/ops.h: its C table (kda_op_arg), the C
// problem struct into the C++ one, and its entries kda_<op>_validate and kda_<op>_run.

#include <cstddef>

#include "core/c_api_support.hpp"
#include "kda/kda.h"
#include "kda/kda.hpp"

// A C table row: a tensor's kda_tensor offset, or an option's field (KDA_TYPE_FLOAT_OR_NONE: its
// has_ flag). `CP` names the C problem struct where this is expanded.
#define KDA_C_OPTION_OFFSET_KDA_TYPE_BOOL(member) offsetof(CP, member)
#define KDA_C_OPTION_OFFSET_KDA_TYPE_INT(member) offsetof(CP, member)
#define KDA_C_OPTION_OFFSET_KDA_TYPE_FLOAT_OR_NONE(member) offsetof(CP, has_##member)
#define KDA_MAKE_C_ARG(member, name, role, type, rank, rule, doc)                    \
  ::kda::c_api::CArg{name,                                                           \
                     doc,                                                            \
                     role,                                                           \
                     rank,                                                           \
                     KDA_WHEN_TENSOR_##role(offsetof(CP, member))                    \
                         KDA_WHEN_OPTION_##role(KDA_C_OPTION_OFFSET_##type(member)), \
                     type,                                                           \
                     rule},

// An option's C field into its C++ member (`in`, `p`: the C and C++ problems).
#define KDA_COPY_C_KDA_TYPE_BOOL(member) p->member = in->member != 0;
#define KDA_COPY_C_KDA_TYPE_INT(member) p->member = in->member;
#define KDA_COPY_C_KDA_TYPE_FLOAT_OR_NONE(member) \
  if (in->has_##member) p->member = in->member;
#define KDA_COPY_C_OPTION(member, name, role, type, rank, rule, doc) \
  KDA_WHEN_OPTION_##role(KDA_COPY_C_##type(member))

namespace kda::c_api {

namespace {

template <typename P>
struct CTable;

#define KDA_DEFINE_C_TABLE(UP, op, Cxx, fla, spec)                                        \
  template <>                                                                             \
  struct CTable<Cxx##Problem> {                                                           \
    using CP = kda_##op##_problem;                                                        \
    static constexpr CArg rows[] = {KDA_##UP##_ARGS(KDA_MAKE_C_ARG)};                     \
    static Status to_problem(const CP* in, Cxx##Problem* p) {                             \
      if (Status s = check_abi_version("problem", in, in ? in->abi_version : 0); !s.ok()) \
        return s;                                                                         \
      if (Status s = to_tensors(in, std::span<const CArg>(rows), p); !s.ok()) return s;   \
      KDA_##UP##_ARGS(KDA_COPY_C_OPTION) return Status::Ok();                             \
    }                                                                                     \
  };
KDA_OPS(KDA_DEFINE_C_TABLE)
#undef KDA_DEFINE_C_TABLE

// The bodies of kda_<op>_validate and kda_<op>_run: C problem -> C++ problem, then validate() or
// kda::run(), every failure recorded as the thread's last error.
template <typename P>
kda_status validate_entry(const typename CTable<P>::CP* in) {
  return guarded([&] {
    P p;
    if (Status s = CTable<P>::to_problem(in, &p); !s.ok()) return s;
    return p.validate();
  });
}

template <typename P>
kda_status run_entry(const typename CTable<P>::CP* in, int32_t backend, int32_t kernel,
                     void* stream) {
  return guarded([&] {
    Backend b{};
    Kernel k{};
    if (Status s = to_backend(backend, &b); !s.ok()) return s;
    if (Status s = to_kernel(kernel, &k); !s.ok()) return s;
    P p;
    if (Status s = CTable<P>::to_problem(in, &p); !s.ok()) return s;
    return run(p, b, stream, k);
  });
}

}  // namespace

const COpInfo* op_info(int32_t op) {
#define KDA_C_OP_INFO(UP, op, Cxx, fla, spec) \
  {#op, fla, CTable<Cxx##Problem>::rows, sizeof(CTable<Cxx##Problem>::CP)},
  static const COpInfo infos[] = {KDA_OPS(KDA_C_OP_INFO)};
#undef KDA_C_OP_INFO
  static_assert(sizeof(infos) / sizeof(infos[0]) == KDA_NUM_OPS, "one entry per KDA_OP_*");
  if (op < 0 || op >= KDA_NUM_OPS) return nullptr;
  return &infos[op];
}

}  // namespace kda::c_api

extern "C" {

#define KDA_DEFINE_C_ENTRIES(UP, op, Cxx, fla, spec)                                            \
  kda_status kda_##op##_validate(const kda_##op##_problem* problem) {                           \
    return kda::c_api::validate_entry<kda::Cxx##Problem>(problem);                              \
  }                                                                                             \
  kda_status kda_##op##_run(const kda_##op##_problem* problem, int32_t backend, int32_t kernel, \
                            void* stream) {                                                     \
    return kda::c_api::run_entry<kda::Cxx##Problem>(problem, backend, kernel, stream);          \
  }
KDA_OPS(KDA_DEFINE_C_ENTRIES)
#undef KDA_DEFINE_C_ENTRIES

}  // extern "C"
