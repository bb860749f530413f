#pragma once
// Pieces that every operator's host-side tooling (ops/<op>/host.cpp) shares: the file checks'
// error text, the SPECs' byte count, the varlen index tensors of a generated problem, the
// per-dtype bars, and the OpIo entries that only name the operator's problem type.

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/host_problem.hpp"
#include "io/metadata.hpp"

namespace kda::io {

// The start of every safetensors error's message (file_error's, and the reader's and writer's
// own messages about the file as a whole).
inline constexpr std::string_view kFileErrorPrefix = "safetensors: ";

// An error in a safetensors file's contents (kFileErrorPrefix + what).
Status file_error(const std::string& what);

// "[2, 64, 4]".
std::string shape_text(const std::vector<int64_t>& shape);

// The SPECs' byte count: every input read once, every output ("out.*") written once, at their
// dtypes.
std::pair<int64_t, int64_t> bytes_read_written(const HostProblem& hp);

// cu_seqlens (and, with pass_chunk_indices, chunk_indices) of a generated varlen problem of
// these sequence lengths, in index_dtype, added to hp. Returns {T, NT}: the tokens and chunks of
// the whole batch. Throws std::invalid_argument for a negative length.
std::pair<int64_t, int64_t> add_varlen_index_tensors(const std::vector<int64_t>& seqlens,
                                                     int64_t chunk_size, DType index_dtype,
                                                     bool pass_chunk_indices, HostProblem* hp);

// The inputs q [B, T, H, K] and v [B, T, HV, V] agree on B and T: what the outputs of the
// operators that take the layer's raw inputs are sized from, checked before any is allocated so
// that a hostile file cannot make us allocate far more than it holds.
Status check_queries_values_sizes(const HostProblem& p);

// A bar per dtype of X.
struct DtypeBars {
  double f32;
  double f16;
  double bf16;
  double of(DType x_dtype) const {
    return x_dtype == DType::f32 ? f32 : x_dtype == DType::f16 ? f16 : bf16;
  }
};

// Required then optional input names of P, table order (OpIo::input_names).
template <typename P>
std::vector<std::string> input_names() {
  std::vector<std::string> names = arg_names<P>(ArgRole::input);
  for (const std::string& n : arg_names<P>(ArgRole::optional)) names.push_back(n);
  return names;
}

template <typename P>
std::vector<std::string> output_names() {
  return arg_names<P>(ArgRole::output);
}

template <typename P>
std::vector<std::string> required_inputs() {
  return arg_names<P>(ArgRole::input);
}

// OpIo::allocate_outputs: every output of P, poisoned, at the shape and dtype its table row gives
// from the inputs. Throws std::invalid_argument when an input it takes its shape from is missing.
template <typename P>
void allocate_outputs_as(HostProblem* hp) {
  const P p = problem_from_views<P>(hp->views(), *hp);
  for (const Arg<P>& a : P::args()) {
    if (a.info.role != ArgRole::output) continue;
    const OutputShape shape = output_shape(p, a);
    for (const int64_t extent : shape.span()) {
      if (extent < 0) {
        throw std::invalid_argument(std::string("output '") + a.info.name + "' takes its shape (" +
                                    a.info.rule + ") from an input the problem lacks");
      }
    }
    hp->tensors[a.info.name] = poisoned(output_dtype(p, a), shape.vector());
  }
}

// Every option of P from safetensors metadata under its table name: a bool (absent: false), an
// integer (absent: `int_fallbacks`' value for it, else the table's default), an optional float
// (absent or "None": none).
template <typename P>
Status options_from_metadata_as(const Metadata& m,
                                const std::map<std::string, int64_t>& int_fallbacks,
                                HostProblem* hp) {
  const P defaults;
  for (const Option<P>& o : P::options()) {
    const char* name = o.info.name;
    if (o.as_bool) {
      bool value = false;
      if (Status s = metadata_bool(m, name, &value); !s.ok()) return s;
      hp->options[name] = value;
    }
    if (o.as_int) {
      const auto fallback = int_fallbacks.find(name);
      int64_t value = 0;
      if (Status s = metadata_int(
              m, name, fallback == int_fallbacks.end() ? defaults.*o.as_int : fallback->second,
              &value);
          !s.ok()) {
        return s;
      }
      hp->options[name] = value;
    }
    if (o.as_float) {
      std::optional<double> value;
      if (Status s = metadata_optional_double(m, name, &value); !s.ok()) return s;
      hp->options[name] = value;
    }
  }
  return Status::Ok();
}

// options_from_metadata_as with chunk_size falling back to the last extent of the input "A"
// ([B, T, HV, BT]: the chunk size is A's width), for the operators that take the forward's Akk.
template <typename P>
Status options_from_metadata_chunk_of_A(const Metadata& m, HostProblem* hp) {
  const HostTensor& A = hp->get("A");
  if (A.shape.empty()) return file_error("input \"A\" is a scalar; expected [B, T, HV, BT]");
  return options_from_metadata_as<P>(m, {{"chunk_size", A.shape.back()}}, hp);
}

// Every option of P into metadata (an optional float only when set), as it reads back.
template <typename P>
void options_to_metadata_as(const HostProblem& hp, Metadata* m) {
  P p;
  set_options(hp, &p);
  for (const Option<P>& o : P::options()) {
    if (o.as_bool) (*m)[o.info.name] = p.*o.as_bool ? "true" : "false";
    if (o.as_int) (*m)[o.info.name] = std::to_string(p.*o.as_int);
    if (o.as_float && p.*o.as_float) (*m)[o.info.name] = metadata_double_text(*(p.*o.as_float));
  }
}

// OpIo::validate: the library's validation of the host problem as P.
template <typename P>
Status validate_as(const HostProblem& hp) {
  return hp.as<P>().validate();
}

// OpIo::run: P over views with the options of `options`.
template <typename P>
Status run_as(const std::map<std::string, TensorView>& views, const HostProblem& options,
              Backend backend, void* stream, Kernel kernel) {
  return run(problem_from_views<P>(views, options), backend, stream, kernel);
}

// The OpIo of operator P: its names, inputs, outputs, validation and run from its table, with its
// own file rules and bars.
template <typename P>
constexpr OpIo make_op_io(Status (*check_output_sizes)(const HostProblem&),
                          Status (*options_from_metadata)(const Metadata&, HostProblem*),
                          void (*options_to_metadata)(const HostProblem&, Metadata*),
                          double (*pass_bar)(DType), double (*golden_bar)(DType)) {
  return {P::kName,
          P::kFlaName,
          OpTraits<P>::spec,
          input_names<P>,
          output_names<P>,
          required_inputs<P>,
          allocate_outputs_as<P>,
          check_output_sizes,
          options_from_metadata,
          options_to_metadata,
          validate_as<P>,
          run_as<P>,
          bytes_read_written,
          pass_bar,
          golden_bar};
}

// make_random_problem with a check of the allocated problem (inputs still zero) before the
// values are drawn; allocate and fill are the operator's own.
template <typename Config>
Status make_checked_random_problem(
    const Config& config, HostProblem (*allocate)(const Config&),
    void (*fill)(const Config&, HostProblem*),
    const std::function<Status(const HostProblem&)>& check_before_filling, HostProblem* out) {
  HostProblem hp = allocate(config);
  if (Status s = check_before_filling(hp); !s.ok()) return s;
  fill(config, &hp);
  *out = std::move(hp);
  return Status::Ok();
}

}  // namespace kda::io
