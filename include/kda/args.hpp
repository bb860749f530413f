#pragma once
// The C++ side of the operators' argument tables (kda/args.h): one TensorView member per table
// entry, and the table itself as (entry, member pointer) pairs for code that walks every
// argument (validation, the C ABI, file I/O, the command line).

#include <cstdint>
#include <span>

#include "kda/args.h"
#include "kda/tensor.hpp"

// Declares a TensorView member for each entry of an argument table (C++ problem structs).
#define KDA_DECLARE_TENSOR_VIEW(member, name, role, rank, doc) TensorView member;

namespace kda {

enum class ArgRole : int32_t {
  input = KDA_ARG_INPUT,
  optional = KDA_ARG_OPTIONAL,  // an input that may be omitted
  output = KDA_ARG_OUTPUT,
};

struct ArgInfo {
  const char* name;  // "q", ..., "out.dq"
  const char* doc;   // shape and dtype
  ArgRole role;
  int rank;
};

// One argument of problem type P: its table entry and where it lives in P.
template <typename P>
struct Arg {
  using Member = TensorView P::*;
  ArgInfo info;
  Member member;
  const TensorView& of(const P& problem) const { return problem.*member; }
  TensorView& of(P& problem) const { return problem.*member; }
};

}  // namespace kda

// One Arg<P> initializer per argument-table row, for a table built where `P` names the problem
// type: `using P = MyProblem; constexpr Arg<P> kArgs[] = {KDA_MY_OP_ARGS(KDA_MAKE_ARG)};`.
#define KDA_MAKE_ARG(member, name, role, rank, doc) \
  ::kda::Arg<P>{{name, doc, static_cast<::kda::ArgRole>(role), rank}, &P::member},
