// Every operator's tables as C++ (Problem::args(), Problem::options()) and describe(), built from
// its rows (kda/args.h) for each operator of kda/ops.h.

#include <string>

#include "core/validate_args.hpp"
#include "kda/kda.hpp"

namespace kda {

namespace {

template <typename P>
std::string describe_problem(const P& problem) {
  std::string text =
      std::string(P::kName) + " problem\n" + validation::describe_args(problem, P::args());
  for (const Option<P>& o : P::options()) {
    text += std::string("  ") + o.info.name + ": ";
    if (o.as_bool) text += problem.*o.as_bool ? "true" : "false";
    if (o.as_int) text += std::to_string(problem.*o.as_int);
    if (o.as_float) {
      const std::optional<double>& value = problem.*o.as_float;
      text += value ? std::to_string(*value) : std::string("None (") + o.info.doc + ")";
    }
    text += "\n";
  }
  return text;
}

}  // namespace

#define KDA_DEFINE_OP_TABLES(UP, op, Cxx, fla, spec)                            \
  std::span<const Arg<Cxx##Problem>> Cxx##Problem::args() {                     \
    using P = Cxx##Problem;                                                     \
    static constexpr Arg<P> kArgs[] = {KDA_##UP##_ARGS(KDA_MAKE_ARG)};          \
    return kArgs;                                                               \
  }                                                                             \
  std::span<const Option<Cxx##Problem>> Cxx##Problem::options() {               \
    using P = Cxx##Problem;                                                     \
    static constexpr Option<P> kOptions[] = {KDA_##UP##_ARGS(KDA_MAKE_OPTION)}; \
    return kOptions;                                                            \
  }                                                                             \
  std::string Cxx##Problem::describe() const {                                  \
    return describe_problem(*this);                                             \
  }
KDA_OPS(KDA_DEFINE_OP_TABLES)
#undef KDA_DEFINE_OP_TABLES

}  // namespace kda
