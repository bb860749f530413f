#pragma once
// The templates of validate_args.hpp (they walk an operator's argument table).

#include <sstream>
#include <string>

namespace kda::validation {

std::string device_mismatch(Device got, Device anchor);
bool views_overlap(const TensorView& a, const TensorView& b);

template <typename P>
Status check_args_present_on_one_device(const P& problem, std::span<const Arg<P>> args,
                                        const TensorView& anchor) {
  bool has_cu_seqlens = false;
  for (const Arg<P>& a : args) {
    const TensorView& t = a.of(problem);
    if (a.info.role == ArgRole::optional && t.empty_arg()) continue;
    if (Status s = check_view(a.info.name, t, a.info.rank); !s.ok()) return s;
    if (std::string(a.info.name) == "cu_seqlens") has_cu_seqlens = true;
  }
  for (const Arg<P>& a : args) {
    if (std::string(a.info.name) == "chunk_indices" && !a.of(problem).empty_arg() &&
        !has_cu_seqlens) {
      return fail("chunk_indices", "given without cu_seqlens; pass cu_seqlens too");
    }
  }
  for (const Arg<P>& a : args) {
    const TensorView& t = a.of(problem);
    if (t.empty_arg()) continue;
    if (!(t.device == anchor.device))
      return fail(a.info.name, device_mismatch(t.device, anchor.device));
  }
  return Status::Ok();
}

template <typename P>
Status check_outputs(const P& problem, std::span<const Arg<P>> args) {
  for (const Arg<P>& o : args) {
    if (o.info.role != ArgRole::output) continue;
    const TensorView& out = o.of(problem);
    if (!out.is_contiguous()) {
      return fail(o.info.name, "expected a contiguous (row-major) output, got " + out.describe());
    }
  }
  for (const Arg<P>& o : args) {
    if (o.info.role != ArgRole::output) continue;
    for (const Arg<P>& other : args) {
      if (other.member == o.member) continue;
      if (views_overlap(o.of(problem), other.of(problem))) {
        return fail(o.info.name, std::string("overlaps '") + other.info.name +
                                     "' in memory; outputs must not alias any other tensor");
      }
    }
  }
  return Status::Ok();
}

template <typename P>
std::string describe_args(const P& problem, std::span<const Arg<P>> args) {
  std::ostringstream os;
  for (const Arg<P>& a : args) {
    const TensorView& t = a.of(problem);
    os << "  " << a.info.name << ": " << (t.empty_arg() ? std::string("None") : t.describe())
       << "\n";
  }
  return os.str();
}

}  // namespace kda::validation
