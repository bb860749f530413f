// The shared validation rules (validate_args.hpp).

#include "core/validate_args.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "core/index_tensor.hpp"

namespace kda::validation {

namespace {

// Element count and highest element offset fit comfortably in 64 bits (with room for the byte
// size), so no later product over the view can overflow.
constexpr int64_t kMaxSpan = int64_t{1} << 56;

bool known_dtype(DType d) {
  const auto code = static_cast<int32_t>(d);
  return code >= static_cast<int32_t>(DType::f16) && code <= static_cast<int32_t>(DType::f64);
}

// chunk_indices (host, shape [NT, 2] already checked) must list, for every sequence in order,
// its chunks 0, 1, ...: the rows fla's prepare_chunk_indices builds from cu_seqlens.
Status check_chunk_indices(const TensorView& cu_seqlens, const TensorView& chunk_indices,
                           int64_t chunk_size) {
  int64_t row = 0;
  return walk_cu_seqlens(
      cu_seqlens.shape[0], [&](int64_t i) { return index_at(cu_seqlens, i); }, chunk_size,
      [&](int64_t seq, int64_t chunks) {
        for (int64_t c = 0; c < chunks; ++c, ++row) {
          const int64_t given_seq = index_at(chunk_indices, row, 0);
          const int64_t given_chunk = index_at(chunk_indices, row, 1);
          if (given_seq != seq || given_chunk != c) {
            return fail("chunk_indices",
                        "disagrees with cu_seqlens at row " + std::to_string(row) + ": expected (" +
                            std::to_string(seq) + ", " + std::to_string(c) + "), got (" +
                            std::to_string(given_seq) + ", " + std::to_string(given_chunk) + ")");
          }
        }
        return Status::Ok();
      });
}

}  // namespace

Status fail(const char* name, const std::string& what) {
  return invalid_argument(std::string("argument '") + name + "': " + what);
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::string shape_str(const TensorView& t) {
  return shape_str(std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.rank));
}

// Checked in this order so that nothing reads shape[] past the rank or divides by an unknown
// element size.
Status check_view(const char* name, const TensorView& t, int rank) {
  if (t.empty_arg()) return fail(name, "is required but was not given (null data, rank 0)");
  if (t.rank < 0 || t.rank > kMaxRank) {
    return fail(name,
                "expected rank " + std::to_string(rank) + ", got rank " + std::to_string(t.rank));
  }
  if (t.rank != rank) {
    return fail(name, "expected rank " + std::to_string(rank) + ", got rank " +
                          std::to_string(t.rank) + " (shape " + shape_str(t) + ")");
  }
  if (!known_dtype(t.dtype)) {
    return fail(name, "unknown dtype code " + std::to_string(static_cast<int32_t>(t.dtype)));
  }
  if (t.device.type != DeviceType::cpu && t.device.type != DeviceType::cuda) {
    return fail(name, "unknown device type " + std::to_string(static_cast<int>(t.device.type)));
  }
  int64_t numel = 1;
  int64_t last_offset = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] < 0) return fail(name, "negative extent in shape " + shape_str(t));
    if (t.strides[d] < 0) return fail(name, "negative stride in dimension " + std::to_string(d));
  }
  for (int d = 0; d < t.rank; ++d) {
    int64_t step = 0;
    if (__builtin_mul_overflow(numel, t.shape[d], &numel) || numel > kMaxSpan ||
        (t.shape[d] > 0 &&
         (__builtin_mul_overflow(t.shape[d] - 1, t.strides[d], &step) ||
          __builtin_add_overflow(last_offset, step, &last_offset) || last_offset > kMaxSpan))) {
      return fail(name, "shape " + shape_str(t) +
                            " with its strides spans more elements than any memory (over 2^56)");
    }
  }
  if (numel > 0 && t.data == nullptr) return fail(name, "data pointer is null");
  const auto addr = reinterpret_cast<uintptr_t>(t.data);
  if (addr % dtype_size(t.dtype) != 0) {
    return fail(name, "data pointer is not aligned to its element size (" +
                          std::to_string(dtype_size(t.dtype)) + " bytes)");
  }
  return Status::Ok();
}

Status check_shape(const char* name, const TensorView& t, std::span<const int64_t> expected,
                   const char* symbolic) {
  for (size_t d = 0; d < expected.size(); ++d) {
    if (t.shape[d] != expected[d]) {
      return fail(name, std::string("expected shape ") + symbolic + " = " +
                            shape_str(std::vector<int64_t>(expected.begin(), expected.end())) +
                            ", got " + shape_str(t));
    }
  }
  return Status::Ok();
}

Status check_dtype(const char* name, const TensorView& t, std::initializer_list<DType> allowed,
                   const char* why) {
  for (DType d : allowed) {
    if (t.dtype == d) return Status::Ok();
  }
  return fail(name,
              std::string("expected dtype ") + why + ", got " + std::string(dtype_name(t.dtype)));
}

Status check_x_dtype(const char* name, const TensorView& t) {
  return check_dtype(name, t, {DType::f16, DType::bf16, DType::f32},
                     "float16, bfloat16 or float32");
}

// "is on cuda:1 but q is on cuda:0" (q: the anchor's name), or for two host views that differ
// only in their index (garbage from a caller), "is on cpu (device index 3) but q is on cpu
// (device index 0)".
std::string device_mismatch(Device got, Device anchor, const char* anchor_name) {
  auto name = [&](Device d) {
    return d.type == DeviceType::cpu && got.type == anchor.type
               ? device_name(d) + " (device index " + std::to_string(d.index) + ")"
               : device_name(d);
  };
  return "is on " + name(got) + " but " + anchor_name + " is on " + name(anchor) +
         "; all tensors must share one device";
}

Status check_float32_option(const char* name, const std::optional<double>& value) {
  if (value && !(std::fabs(*value) <= std::numeric_limits<float>::max())) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", *value);
    return fail(name, std::string("expected a finite number with |") + name +
                          "| <= 3.40282e+38 (float32's largest) or None, got " + got);
  }
  return Status::Ok();
}

Status check_layer_activations(bool gate_in_kernel, const TensorView& A_log,
                               const TensorView& dt_bias, const std::optional<double>& lower_bound,
                               bool beta_sigmoid, bool allow_neg_eigval, int64_t HV, int64_t K) {
  if (!gate_in_kernel) {
    // Without the gate in the kernel these do not enter the layer: refusing them keeps a
    // caller from believing they did.
    for (auto [name, view] : {std::pair{"A_log", &A_log}, {"dt_bias", &dt_bias}}) {
      if (!view->empty_arg()) {
        return fail(name,
                    "given without use_gate_in_kernel; it enters the layer only with the "
                    "gate in the kernel");
      }
    }
    if (lower_bound) {
      return fail("lower_bound",
                  "given without use_gate_in_kernel; it bounds only the gate computed in the "
                  "kernel");
    }
  } else {
    if (A_log.empty_arg() && !lower_bound) {
      return fail("A_log", "required with use_gate_in_kernel unless lower_bound is set");
    }
    if (!A_log.empty_arg()) {
      if (Status s = check_shape("A_log", A_log, {HV}, "[HV] (from v)"); !s.ok()) return s;
    }
    if (!dt_bias.empty_arg()) {
      if (Status s = check_shape("dt_bias", dt_bias, {HV * K}, "[HV * K] (from v, q)"); !s.ok())
        return s;
    }
    if (lower_bound && !(*lower_bound < 0.0)) {
      char got[32];
      std::snprintf(got, sizeof got, "%g", *lower_bound);
      return fail("lower_bound",
                  std::string("expected a negative number (the gate lies in [lower_bound, 0)), "
                              "got ") +
                      got);
    }
  }
  if (allow_neg_eigval && !beta_sigmoid) {
    return fail("allow_neg_eigval", "takes effect only with use_beta_sigmoid_in_kernel");
  }
  return check_float32_option("lower_bound", lower_bound);
}

Status check_states(const TensorView& h, const TensorView& dh, int64_t B, int64_t NT, int64_t HV,
                    int64_t K, int64_t V, bool varlen, bool state_v_first) {
  const int64_t hB = varlen ? 1 : B;
  const std::array<int64_t, 5> shape = state_v_first ? std::array<int64_t, 5>{hB, NT, HV, V, K}
                                                     : std::array<int64_t, 5>{hB, NT, HV, K, V};
  const char* symbolic = state_v_first ? "[B, NT, HV, V, K] (state_v_first)" : "[B, NT, HV, K, V]";
  for (auto [name, view] : {std::pair{"h", &h}, {"dh", &dh}}) {
    if (Status s = check_shape(name, *view, shape, symbolic); !s.ok()) return s;
  }
  return Status::Ok();
}

Status check_chunk_size(int64_t chunk_size) {
  if (chunk_size != 16 && chunk_size != 32 && chunk_size != 64) {
    return fail("chunk_size", "expected 16, 32 or 64, got " + std::to_string(chunk_size));
  }
  return Status::Ok();
}

Status check_chunks(const TensorView& cu_seqlens, const TensorView& chunk_indices, int64_t B,
                    int64_t T, int64_t chunk_size, int64_t device_nt_bound, ChunkCount* out) {
  const bool varlen = !cu_seqlens.empty_arg();
  for (auto [name, view] :
       {std::pair{"cu_seqlens", &cu_seqlens}, {"chunk_indices", &chunk_indices}}) {
    if (view->empty_arg()) continue;
    if (Status s = check_dtype(name, *view, {DType::i32, DType::i64}, "int32 or int64"); !s.ok()) {
      return s;
    }
  }
  if (!varlen) {
    out->num_seqs = B;
    out->NT = T / chunk_size + (T % chunk_size != 0);
    return Status::Ok();
  }
  if (B != 1) {
    return fail("cu_seqlens",
                "given, so the batch size must be 1 (sequences are packed along T), got B = " +
                    std::to_string(B));
  }
  out->num_seqs = cu_seqlens.shape[0] - 1;
  if (out->num_seqs < 0) return fail("cu_seqlens", "expected at least one entry (0)");
  if (!chunk_indices.empty_arg() && chunk_indices.shape[1] != 2) {
    return fail("chunk_indices", "expected shape [NT, 2], got " + shape_str(chunk_indices));
  }
  if (cu_seqlens.device.type != DeviceType::cpu) {
    // Device-resident indices: the contents are checked by the kernels (docs/design.md).
    out->NT = chunk_indices.empty_arg() ? device_nt_bound : chunk_indices.shape[0];
    return Status::Ok();
  }
  // The first and last entries before the walk over the others (cheap rejections first: a
  // wrong last entry of 10^9 took 2.5 s of walking to report). Then entry by entry: nothing
  // allocated, whatever size the descriptor claims.
  const int64_t entries = cu_seqlens.shape[0];
  if (const int64_t first = index_at(cu_seqlens, 0); first != 0) {
    return fail("cu_seqlens", "expected cu_seqlens[0] == 0, got " + std::to_string(first));
  }
  if (const int64_t last = index_at(cu_seqlens, entries - 1); last != T) {
    return fail("cu_seqlens", "expected the last entry to equal T = " + std::to_string(T) +
                                  ", got " + std::to_string(last));
  }
  int64_t chunks_total = 0;
  if (Status s = count_cu_seqlens_chunks(
          entries, [&](int64_t i) { return index_at(cu_seqlens, i); }, chunk_size, &chunks_total);
      !s.ok()) {
    return s;
  }
  out->NT = chunks_total;
  if (!chunk_indices.empty_arg()) {
    if (chunk_indices.shape[0] != out->NT) {
      return fail("chunk_indices", "expected shape [NT, 2] = [" + std::to_string(out->NT) +
                                       ", 2] (NT from cu_seqlens), got " +
                                       shape_str(chunk_indices));
    }
    if (chunk_indices.device.type == DeviceType::cpu) {
      return check_chunk_indices(cu_seqlens, chunk_indices, chunk_size);
    }
  }
  return Status::Ok();
}

int64_t state_scan_extent(std::string_view name, const TensorView& anchor, const TensorView& values,
                          const TensorView& cu_seqlens, const TensorView& chunk_indices,
                          int64_t chunk_size, bool state_v_first) {
  if (name == "chunks") {
    if (anchor.rank != 4 || chunk_size < 1) return -1;
    if (!cu_seqlens.empty_arg() && cu_seqlens.device.type != DeviceType::cpu &&
        chunk_indices.empty_arg()) {
      return -1;
    }
    ChunkCount counted;
    if (!check_chunks(cu_seqlens, chunk_indices, anchor.shape[0], anchor.shape[1], chunk_size, -1,
                      &counted)
             .ok()) {
      return -1;
    }
    return counted.NT;
  }
  if (name == "seqs") {
    if (!cu_seqlens.empty_arg()) return cu_seqlens.rank == 1 ? cu_seqlens.shape[0] - 1 : -1;
    return anchor.rank == 4 ? anchor.shape[0] : -1;
  }
  const int64_t K = anchor.rank == 4 ? anchor.shape[3] : -1;
  const int64_t V = values.rank == 4 ? values.shape[3] : -1;
  if (name == "state_rows") return state_v_first ? V : K;
  if (name == "state_cols") return state_v_first ? K : V;
  return -1;
}

}  // namespace kda::validation
