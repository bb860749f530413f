#pragma once
// The templates of validate_args.hpp (they walk an operator's argument table).

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kda::validation {

// "is on cuda:1 but <anchor_name> is on cuda:0; ...".
std::string device_mismatch(Device got, Device anchor, const char* anchor_name);
// Two byte spans [lo, hi) (TensorView::byte_span) share a byte; an empty one shares none.
inline bool spans_overlap(std::pair<uintptr_t, uintptr_t> a, std::pair<uintptr_t, uintptr_t> b) {
  return a.first < a.second && b.first < b.second && a.first < b.second && b.first < a.second;
}

template <typename P>
Status check_args_present_on_one_device(const P& problem, std::span<const Arg<P>> args,
                                        const TensorView& anchor) {
  bool has_cu_seqlens = false;
  const char* anchor_name = "the first tensor";
  for (const Arg<P>& a : args) {
    const TensorView& t = a.of(problem);
    if (&t == &anchor) anchor_name = a.info.name;
    if (a.info.role == ArgRole::optional && t.empty_arg()) continue;
    if (Status s = check_view(a.info.name, t, a.info.rank); !s.ok()) return s;
    if (std::strcmp(a.info.name, "cu_seqlens") == 0) has_cu_seqlens = true;
  }
  for (const Arg<P>& a : args) {
    if (std::strcmp(a.info.name, "chunk_indices") == 0 && !a.of(problem).empty_arg() &&
        !has_cu_seqlens) {
      return fail("chunk_indices", "given without cu_seqlens; pass cu_seqlens too");
    }
  }
  for (const Arg<P>& a : args) {
    const TensorView& t = a.of(problem);
    if (t.empty_arg()) continue;
    if (!(t.device == anchor.device))
      return fail(a.info.name, device_mismatch(t.device, anchor.device, anchor_name));
  }
  return Status::Ok();
}

template <typename P>
Status check_arg_dtypes(const P& problem, std::span<const Arg<P>> args, DType x,
                        const TensorView* h) {
  const char* anchor = P::args()[0].info.name;
  const auto same_as_q = [&] {
    return std::string(dtype_name(x)) + " (the dtype of " + anchor + ")";
  };
  const auto x_or_f32 = [&] { return x == DType::f32 ? same_as_q() : same_as_q() + " or float32"; };
  for (const Arg<P>& a : args) {
    const TensorView& t = a.of(problem);
    if (a.info.role == ArgRole::output || a.info.type == ArgType::x ||
        a.info.type == ArgType::index || t.empty_arg()) {
      continue;
    }
    Status s = Status::Ok();
    switch (a.info.type) {
      case ArgType::of_q:
        s = check_dtype(a.info.name, t, {x}, same_as_q);
        break;
      case ArgType::of_q_or_f32:
        s = check_dtype(a.info.name, t, {x, DType::f32}, x_or_f32);
        break;
      case ArgType::of_h:
        if (h != nullptr && t.dtype != h->dtype) {
          s = fail(a.info.name, "expected the dtype of h (" + std::string(dtype_name(h->dtype)) +
                                    "), got " + std::string(dtype_name(t.dtype)));
        }
        break;
      default:
        s = check_dtype(a.info.name, t, {DType::f32}, "float32");
        break;
    }
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

template <typename P>
Status check_outputs(const P& problem, std::span<const Arg<P>> args) {
  for (const Arg<P>& o : args) {
    if (o.info.role != ArgRole::output) continue;
    const TensorView& out = o.of(problem);
    // Its dtype and shape from the table's type and rule; the message names it as the table's doc
    // does
    // ("[B, T, HV, K]"), built only on failure.
    if (const DType dtype = output_dtype(problem, o); out.dtype != dtype) {
      const std::string why = std::string(dtype_name(dtype)) +
                              (o.info.type == ArgType::of_q
                                   ? std::string(" (the dtype of ") + P::args()[0].info.name + ")"
                                   : std::string());
      return check_dtype(o.info.name, out, {dtype}, why.c_str());
    }
    const OutputShape expected = output_shape(problem, o);
    for (int d = 0; d < expected.rank; ++d) {
      if (out.shape[d] == expected.extents[static_cast<size_t>(d)]) continue;
      const std::string_view doc = o.info.doc;
      const std::string symbolic(doc.substr(0, doc.find(']') + 1));
      return check_shape(o.info.name, out, expected.span(), symbolic.c_str());
    }
    if (!out.is_contiguous()) {
      return fail(o.info.name, "expected a contiguous (row-major) output, got " + out.describe());
    }
  }
  // Every argument's byte span once (an output is compared with every other argument: the
  // spans would otherwise be recomputed for each pair).
  using Span = std::pair<uintptr_t, uintptr_t>;
  constexpr size_t kInline = 32;
  std::array<Span, kInline> inline_spans;
  std::vector<Span> heap_spans;
  Span* spans = inline_spans.data();
  if (args.size() > kInline) {
    heap_spans.resize(args.size());
    spans = heap_spans.data();
  }
  for (size_t i = 0; i < args.size(); ++i) spans[i] = args[i].of(problem).byte_span();
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg<P>& o = args[i];
    if (o.info.role != ArgRole::output) continue;
    for (size_t j = 0; j < args.size(); ++j) {
      const Arg<P>& other = args[j];
      if (other.member == o.member) continue;
      if (spans_overlap(spans[i], spans[j])) {
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
