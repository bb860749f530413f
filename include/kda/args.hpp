#pragma once
// The C++ side of the operators' tables (kda/args.h) and of their list (kda/ops.h): each problem
// struct's members (a TensorView per tensor row, a typed field per option row), the tables as
// (row, member pointer) pairs for code that walks every argument (validation, the C ABI, file I/O,
// the command line, the torch ops), and each operator's names through OpTraits<Problem>.

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kda/backend.hpp"
#include "kda/kda.h"
#include "kda/status.hpp"
#include "kda/tensor.hpp"

namespace kda {

enum class ArgRole : int32_t {
  input = KDA_ARG_INPUT,
  optional = KDA_ARG_OPTIONAL,  // a tensor that may be omitted
  output = KDA_ARG_OUTPUT,
  option = KDA_ARG_OPTION,  // a scalar option
};

enum class ArgType : int32_t {
  x = KDA_TYPE_X,
  of_q = KDA_TYPE_OF_Q,
  of_q_or_f32 = KDA_TYPE_OF_Q_OR_F32,
  of_h = KDA_TYPE_OF_H,
  f32 = KDA_TYPE_F32,
  index = KDA_TYPE_INDEX,
  boolean = KDA_TYPE_BOOL,
  integer = KDA_TYPE_INT,
  float_or_none = KDA_TYPE_FLOAT_OR_NONE,
};

// One row of a table, as kda_op_arg reports it.
struct ArgInfo {
  const char* name;  // "q", ..., "scale", ..., "out.dq"
  const char* doc;   // shape and dtype, or the option's meaning
  ArgRole role;
  int rank;  // 0 for options
  ArgType type;
  const char* rule;  // an output's shape rule, an option's default, "" for inputs
};

// One tensor of problem type P: its row and where it lives in P.
template <typename P>
struct Arg {
  using Member = TensorView P::*;
  ArgInfo info;
  Member member;
  const TensorView& of(const P& problem) const { return problem.*member; }
  TensorView& of(P& problem) const { return problem.*member; }
};

// One option of problem type P: its row and its field (the one pointer of its type is set).
template <typename P>
struct Option {
  // Aliases, not spelled inline: nvcc's host pass rewrites an inline member-pointer declarator
  // with parentheses that -Werror=parentheses refuses.
  using BoolField = bool P::*;
  using IntField = int64_t P::*;
  using FloatField = std::optional<double> P::*;
  ArgInfo info;
  BoolField as_bool = nullptr;
  IntField as_int = nullptr;
  FloatField as_float = nullptr;
};

// Each operator's names (kda/ops.h), specialized below for every operator of KDA_OPS.
template <typename P>
struct OpTraits;

// Validates problem P (any operator's), then runs it. For Backend::cuda every tensor must live
// on one CUDA device; the work is queued on `stream` (a cudaStream_t; nullptr is the legacy
// default stream) with no allocation and no synchronization. CPU backends ignore `stream` and
// return when the outputs are written. `kernel` picks the CUDA kernel (CPU backends take auto).
// Defined for every operator of KDA_OPS in core/run_ops.cpp.
template <typename P>
Status run(const P& problem, Backend backend, void* stream = nullptr,
           Kernel kernel = Kernel::auto_);

// An output's extents (rank <= KDA_MAX_RANK), with no allocation.
struct OutputShape {
  std::array<int64_t, KDA_MAX_RANK> extents{};
  int rank = 0;
  std::span<const int64_t> span() const { return {extents.data(), static_cast<size_t>(rank)}; }
  std::vector<int64_t> vector() const { return {extents.begin(), extents.begin() + rank}; }
};

namespace detail {

// One term of an output's shape rule ("v.2"): the tensor row it reads (its index in P::args())
// and the dim; or, for a term without a dot ("chunks"), the name of an extent the problem
// computes (P::named_extent).
struct ShapeTerm {
  int arg = -1;
  int dim = 0;
  std::string_view named;
};
struct ShapeRule {
  std::array<ShapeTerm, KDA_MAX_RANK> terms{};
  int rank = 0;
};

// Every tensor row's shape rule with its input names resolved, once per operator (an input's
// row is an empty rule).
template <typename P>
const std::vector<ShapeRule>& shape_rules() {
  static const std::vector<ShapeRule> rules = [] {
    std::span<const Arg<P>> args = P::args();
    std::vector<ShapeRule> out(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      std::string_view rule = args[i].info.rule;
      while (!rule.empty() && out[i].rank < KDA_MAX_RANK) {
        const size_t end = rule.find(' ');
        const std::string_view term = rule.substr(0, end);
        rule = end == std::string_view::npos ? std::string_view() : rule.substr(end + 1);
        const size_t dot = term.rfind('.');
        ShapeTerm t;
        if (dot == std::string_view::npos) {
          t.named = term;
          out[i].terms[static_cast<size_t>(out[i].rank++)] = t;
          continue;
        }
        t.dim = term[dot + 1] - '0';
        for (size_t a = 0; a < args.size(); ++a) {
          if (args[a].info.role != ArgRole::output && term.substr(0, dot) == args[a].info.name) {
            t.arg = static_cast<int>(a);
          }
        }
        out[i].terms[static_cast<size_t>(out[i].rank++)] = t;
      }
    }
    return out;
  }();
  return rules;
}

}  // namespace detail

// The extents of output `out` (a row of P::args()) of `problem` from its shape rule
// ("q.0 q.1 v.2 q.3": extent i is the named input's dim; a term without a dot is the problem's
// named extent): how every face sizes the outputs (allocation in the tooling, the torch ops and
// Python's, validation's check). An extent whose input is absent or not of its table rank is
// -1, which no tensor has: a wrong rank never sizes an output.
template <typename P>
OutputShape output_shape(const P& problem, const Arg<P>& out) {
  std::span<const Arg<P>> args = P::args();
  const detail::ShapeRule& rule = detail::shape_rules<P>()[static_cast<size_t>(&out - args.data())];
  OutputShape shape;
  shape.rank = rule.rank;
  for (int d = 0; d < rule.rank; ++d) {
    const detail::ShapeTerm& term = rule.terms[static_cast<size_t>(d)];
    int64_t extent = -1;
    if (!term.named.empty()) {
      if constexpr (requires { problem.named_extent(term.named); }) {
        extent = problem.named_extent(term.named);
      }
    } else if (term.arg >= 0) {
      const Arg<P>& input = args[static_cast<size_t>(term.arg)];
      const TensorView& t = input.of(problem);
      if (!t.empty_arg() && t.rank == input.info.rank && term.dim < t.rank) {
        extent = t.shape[term.dim];
      }
    }
    shape.extents[static_cast<size_t>(d)] = extent;
  }
  return shape;
}

// The problem's anchor: its table's first tensor row (KDA_TYPE_X: q, or chunk_fwd_h's k), which
// sets X and the device every other tensor must share.
template <typename P>
const TensorView& anchor_of(const P& problem) {
  return P::args()[0].of(problem);
}

// The output's dtype: the anchor's (X) for KDA_TYPE_OF_Q, else float32.
template <typename P>
DType output_dtype(const P& problem, const Arg<P>& out) {
  return out.info.type == ArgType::of_q ? anchor_of(problem).dtype : DType::f32;
}

namespace detail {

// An option's default from its table text ("64", "false"): evaluated where the member is
// declared, so the default is written only in the table.
constexpr int64_t parse_default_int(std::string_view text) {
  int64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') throw "option default: expected digits";
    value = value * 10 + (c - '0');
  }
  return value;
}

constexpr bool parse_default_bool(std::string_view text) {
  if (text == "true") return true;
  if (text != "false") throw "option default: expected true or false";
  return false;
}

}  // namespace detail

}  // namespace kda

// A problem struct's member for each table row.
#define KDA_CXX_FIELD_KDA_TYPE_BOOL(member, rule) \
  bool member = ::kda::detail::parse_default_bool(rule);
#define KDA_CXX_FIELD_KDA_TYPE_INT(member, rule) \
  int64_t member = ::kda::detail::parse_default_int(rule);
#define KDA_CXX_FIELD_KDA_TYPE_FLOAT_OR_NONE(member, rule) std::optional<double> member;
#define KDA_DECLARE_MEMBER(member, name, role, type, rank, rule, doc) \
  KDA_WHEN_TENSOR_##role(TensorView member;)                          \
      KDA_WHEN_OPTION_##role(KDA_CXX_FIELD_##type(member, rule))

// What every problem struct declares from its table (inside `struct <Cxx>Problem { ... }`): its
// members, kName / kFlaName, args() (the tensor rows), options() (the option rows) and describe()
// (one line per argument and option, for logs and error reports). Defined in core/op_tables.cpp.
#define KDA_PROBLEM_TABLE_MEMBERS(UP, Cxx)                                         \
  KDA_##UP##_ARGS(KDA_DECLARE_MEMBER) static constexpr const char* kName =         \
      ::kda::OpTraits<Cxx##Problem>::name;                                         \
  static constexpr const char* kFlaName = ::kda::OpTraits<Cxx##Problem>::fla_name; \
  static std::span<const ::kda::Arg<Cxx##Problem>> args();                         \
  static std::span<const ::kda::Option<Cxx##Problem>> options();                   \
  std::string describe() const;

// One Arg<P> initializer per tensor row and one Option<P> per option row, for tables built where
// `P` names the problem type: `constexpr Arg<P> kArgs[] = {KDA_MY_OP_ARGS(KDA_MAKE_ARG)};`.
#define KDA_MAKE_ARG(member, name, role, type, rank, rule, doc)                             \
  KDA_WHEN_TENSOR_##role(::kda::Arg<P>{{name, doc, static_cast<::kda::ArgRole>(role), rank, \
                                        static_cast<::kda::ArgType>(type), rule},           \
                                       &P::member}, )
#define KDA_OPTION_FIELD_KDA_TYPE_BOOL(member) &P::member, nullptr, nullptr
#define KDA_OPTION_FIELD_KDA_TYPE_INT(member) nullptr, &P::member, nullptr
#define KDA_OPTION_FIELD_KDA_TYPE_FLOAT_OR_NONE(member) nullptr, nullptr, &P::member
#define KDA_MAKE_OPTION(member, name, role, type, rank, rule, doc)                   \
  KDA_WHEN_OPTION_##role(::kda::Option<P>{{name, doc, ::kda::ArgRole::option, 0,     \
                                           static_cast<::kda::ArgType>(type), rule}, \
                                          KDA_OPTION_FIELD_##type(member)}, )

// OpTraits<<Cxx>Problem> for every operator: its code, names and contract.
#define KDA_DECLARE_OP_TRAITS(UP, op, Cxx, fla, spec_file) \
  namespace kda {                                          \
  struct Cxx##Problem;                                     \
  struct Cxx##Dims;                                        \
  template <>                                              \
  struct OpTraits<Cxx##Problem> {                          \
    using Dims = Cxx##Dims;                                \
    using CProblem = kda_##op##_problem;                   \
    static constexpr int32_t code = KDA_OP_##UP;           \
    static constexpr const char* name = #op;               \
    static constexpr const char* fla_name = fla;           \
    static constexpr const char* spec = spec_file;         \
  };                                                       \
  }
KDA_OPS(KDA_DECLARE_OP_TRAITS)
