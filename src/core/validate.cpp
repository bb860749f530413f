// Problem::validate: every rule of SPEC.md, written once. Each failure names the argument and
// what was expected.

#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/index_tensor.hpp"
#include "kda/problem.hpp"
#include "kda/varlen.hpp"

namespace kda {

namespace {

constexpr int64_t kMaxHeadDim = 256;

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

Status fail(const char* name, const std::string& what) {
  return invalid_argument(std::string("argument '") + name + "': " + what);
}

// Element count and highest element offset fit comfortably in 64 bits (with room for the byte
// size), so no later product over the view can overflow.
constexpr int64_t kMaxSpan = int64_t{1} << 56;

bool known_dtype(DType d) {
  const auto code = static_cast<int32_t>(d);
  return code >= static_cast<int32_t>(DType::f16) && code <= static_cast<int32_t>(DType::f64);
}

// Present, rank as expected, known dtype and device, extents and strides >= 0 with a span that
// fits in 64 bits, data non-null unless empty, aligned. Checked in this order so that nothing
// reads shape[] past the rank or divides by an unknown element size.
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

Status check_shape(const char* name, const TensorView& t, const std::vector<int64_t>& expected,
                   const char* symbolic) {
  for (size_t d = 0; d < expected.size(); ++d) {
    if (t.shape[d] != expected[d]) {
      return fail(name, std::string("expected shape ") + symbolic + " = " + shape_str(expected) +
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

// "is on cuda:1 but q is on cuda:0", or for two host views that differ only in their index
// (garbage from a caller), "is on cpu (device index 3) but q is on cpu (device index 0)".
std::string device_mismatch(Device got, Device q_device) {
  auto name = [&](Device d) {
    return d.type == DeviceType::cpu && got.type == q_device.type
               ? device_name(d) + " (device index " + std::to_string(d.index) + ")"
               : device_name(d);
  };
  return "is on " + name(got) + " but q is on " + name(q_device) +
         "; all tensors must share one device";
}

bool is_x_dtype(DType d) {
  return d == DType::f16 || d == DType::bf16 || d == DType::f32;
}

}  // namespace

double Problem::effective_scale() const {
  if (scale) return *scale;
  const double K = k.rank == 4 ? static_cast<double>(k.shape[3]) : 1.0;
  return 1.0 / std::sqrt(K > 0 ? K : 1.0);
}

Status Problem::validate(Dims* out) const {
  Dims d;
  // --- presence and ranks ---------------------------------------------------------------
  struct Named {
    const char* name;
    const TensorView* view;
    int rank;
  };
  const Named required[] = {
      {"q", &q, 4},       {"k", &k, 4},   {"v", &v, 4},   {"v_new", &v_new, 4},   {"g", &g, 4},
      {"beta", &beta, 3}, {"A", &A, 4},   {"h", &h, 5},   {"do", &do_, 4},        {"dh", &dh, 5},
      {"dv", &dv, 4},     {"dq", &dq, 4}, {"dk", &dk, 4}, {"dv_out", &dv_out, 4}, {"db", &db, 3},
      {"dg", &dg, 4},     {"dA", &dA, 4},
  };
  for (const Named& n : required) {
    if (Status s = check_view(n.name, *n.view, n.rank); !s.ok()) return s;
  }
  d.varlen = !cu_seqlens.empty_arg();
  if (d.varlen) {
    if (Status s = check_view("cu_seqlens", cu_seqlens, 1); !s.ok()) return s;
  }
  if (!chunk_indices.empty_arg()) {
    if (!d.varlen) return fail("chunk_indices", "given without cu_seqlens; pass cu_seqlens too");
    if (Status s = check_view("chunk_indices", chunk_indices, 2); !s.ok()) return s;
  }

  // --- one device for everything ------------------------------------------------------
  for (const Named& n : required) {
    if (!(n.view->device == q.device)) {
      return fail(n.name, device_mismatch(n.view->device, q.device));
    }
  }
  for (auto [name, view] :
       {std::pair{"cu_seqlens", &cu_seqlens}, {"chunk_indices", &chunk_indices}}) {
    if (!view->empty_arg() && !(view->device == q.device)) {
      return fail(name, device_mismatch(view->device, q.device));
    }
  }

  // --- dtypes ---------------------------------------------------------------------------
  if (!is_x_dtype(q.dtype)) {
    return fail("q", "expected dtype float16, bfloat16 or float32, got " +
                         std::string(dtype_name(q.dtype)));
  }
  d.x_dtype = q.dtype;
  const std::string x_name(dtype_name(d.x_dtype));
  const std::string same_as_q = x_name + " (the dtype of q)";
  for (auto [name, view] :
       {std::pair{"k", &k}, {"v", &v}, {"v_new", &v_new}, {"A", &A}, {"do", &do_}, {"dv", &dv}}) {
    if (Status s = check_dtype(name, *view, {d.x_dtype}, same_as_q.c_str()); !s.ok()) return s;
  }
  if (Status s = check_dtype("g", g, {DType::f32}, "float32"); !s.ok()) return s;
  // beta, h and dh take X or float32: one choice, not "float32 or float32", when X is float32.
  const std::string x_or_f32 =
      d.x_dtype == DType::f32 ? same_as_q : x_name + " (the dtype of q) or float32";
  if (Status s = check_dtype("beta", beta, {d.x_dtype, DType::f32}, x_or_f32.c_str()); !s.ok()) {
    return s;
  }
  d.beta_dtype = beta.dtype;
  if (Status s = check_dtype("h", h, {DType::f32, d.x_dtype}, x_or_f32.c_str()); !s.ok()) {
    return s;
  }
  if (dh.dtype != h.dtype) {
    return fail("dh", "expected the dtype of h (" + std::string(dtype_name(h.dtype)) + "), got " +
                          std::string(dtype_name(dh.dtype)));
  }
  d.h_dtype = h.dtype;
  for (auto [name, view] :
       {std::pair{"dq", &dq}, {"dk", &dk}, {"db", &db}, {"dg", &dg}, {"dA", &dA}}) {
    if (Status s = check_dtype(name, *view, {DType::f32}, "float32"); !s.ok()) return s;
  }
  if (Status s = check_dtype("dv_out", dv_out, {d.x_dtype}, same_as_q.c_str()); !s.ok()) return s;
  for (auto [name, view] :
       {std::pair{"cu_seqlens", &cu_seqlens}, {"chunk_indices", &chunk_indices}}) {
    if (view->empty_arg()) continue;
    if (Status s = check_dtype(name, *view, {DType::i32, DType::i64}, "int32 or int64"); !s.ok()) {
      return s;
    }
  }

  // --- sizes ----------------------------------------------------------------------------
  d.B = q.shape[0];
  d.T = q.shape[1];
  d.H = q.shape[2];
  d.K = q.shape[3];
  d.HV = v.shape[2];
  d.V = v.shape[3];
  if (d.K < 1 || d.K > kMaxHeadDim) {
    return fail("q", "expected head dim K (last extent) in 1..256, got " + std::to_string(d.K));
  }
  if (d.H < 1) return fail("q", "expected at least one head (H >= 1), got H = 0");
  if (Status s = check_shape("k", k, {d.B, d.T, d.H, d.K}, "[B, T, H, K] (from q)"); !s.ok()) {
    return s;
  }
  if (Status s = check_shape("v", v, {d.B, d.T}, "[B, T, ...] (B, T from q)"); !s.ok()) return s;
  if (d.V < 1 || d.V > kMaxHeadDim) {
    return fail("v", "expected head dim V (last extent) in 1..256, got " + std::to_string(d.V));
  }
  if (d.HV < 1 || d.HV % d.H != 0) {
    return fail("v", "expected value heads HV (dim 2) to be a positive multiple of H = " +
                         std::to_string(d.H) + ", got HV = " + std::to_string(d.HV));
  }
  const std::vector<int64_t> shape_v{d.B, d.T, d.HV, d.V};
  for (auto [name, view] :
       {std::pair{"v_new", &v_new}, {"do", &do_}, {"dv", &dv}, {"dv_out", &dv_out}}) {
    if (Status s = check_shape(name, *view, shape_v, "[B, T, HV, V] (from q and v)"); !s.ok()) {
      return s;
    }
  }
  const std::vector<int64_t> shape_gk{d.B, d.T, d.HV, d.K};
  for (auto [name, view] : {std::pair{"g", &g}, {"dq", &dq}, {"dk", &dk}, {"dg", &dg}}) {
    if (Status s = check_shape(name, *view, shape_gk, "[B, T, HV, K] (from q and v)"); !s.ok()) {
      return s;
    }
  }
  for (auto [name, view] : {std::pair{"beta", &beta}, {"db", &db}}) {
    if (Status s = check_shape(name, *view, {d.B, d.T, d.HV}, "[B, T, HV] (from q and v)");
        !s.ok()) {
      return s;
    }
  }
  if (chunk_size != 16 && chunk_size != 32 && chunk_size != 64) {
    return fail("chunk_size", "expected 16, 32 or 64, got " + std::to_string(chunk_size));
  }
  d.BT = chunk_size;
  if (A.shape[3] != chunk_size) {
    return fail("A", "expected last extent == chunk_size = " + std::to_string(chunk_size) +
                         ", got A.shape[-1] = " + std::to_string(A.shape[3]));
  }
  for (auto [name, view] : {std::pair{"A", &A}, {"dA", &dA}}) {
    if (Status s = check_shape(name, *view, {d.B, d.T, d.HV, d.BT}, "[B, T, HV, BT] (from q, v)");
        !s.ok()) {
      return s;
    }
  }
  // Every backend but cpu-ref computes with scale in float32: a finite double past float's range
  // would become inf there and turn zero products into NaN.
  if (scale && !(std::fabs(*scale) <= std::numeric_limits<float>::max())) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", *scale);
    return fail("scale",
                std::string("expected a finite number with |scale| <= 3.40282e+38 (float32's "
                            "largest) or None, got ") +
                    got);
  }

  // --- outputs: contiguous, disjoint from each other and from every input ---------------
  const Named outputs[] = {{"dq", &dq, 4}, {"dk", &dk, 4}, {"dv_out", &dv_out, 4},
                           {"db", &db, 3}, {"dg", &dg, 4}, {"dA", &dA, 4}};
  for (const Named& o : outputs) {
    if (!o.view->is_contiguous()) {
      return fail(o.name, "expected a contiguous (row-major) output, got " + o.view->describe());
    }
  }
  auto overlaps = [](const TensorView& a, const TensorView& b) {
    auto [alo, ahi] = a.byte_span();
    auto [blo, bhi] = b.byte_span();
    return alo < ahi && blo < bhi && alo < bhi && blo < ahi;
  };
  for (const Named& o : outputs) {
    for (const Named& other : required) {
      if (other.view == o.view) continue;
      if (overlaps(*o.view, *other.view)) {
        return fail(o.name, std::string("overlaps '") + other.name +
                                "' in memory; outputs must not alias any other tensor");
      }
    }
    for (auto [name, view] :
         {std::pair{"cu_seqlens", &cu_seqlens}, {"chunk_indices", &chunk_indices}}) {
      if (overlaps(*o.view, *view)) {
        return fail(o.name, std::string("overlaps '") + name + "' in memory");
      }
    }
  }
  // --- chunks: fixed length or cu_seqlens (index contents read last, and only what the
  //     descriptor says exists: N + 1 cu_seqlens entries, NT chunk_indices rows) ------------
  if (!d.varlen) {
    d.num_seqs = d.B;
    d.NT = d.T / d.BT + (d.T % d.BT != 0);
  } else {
    if (d.B != 1) {
      return fail("cu_seqlens",
                  "given, so the batch size must be 1 (sequences are packed along T), got B = " +
                      std::to_string(d.B));
    }
    d.num_seqs = cu_seqlens.shape[0] - 1;
    if (d.num_seqs < 0) return fail("cu_seqlens", "expected at least one entry (0)");
    if (!chunk_indices.empty_arg() && chunk_indices.shape[1] != 2) {
      return fail("chunk_indices", "expected shape [NT, 2], got " + shape_str(chunk_indices));
    }
    if (cu_seqlens.device.type == DeviceType::cpu) {
      // Entry by entry: nothing allocated, whatever size the descriptor claims.
      const int64_t entries = cu_seqlens.shape[0];
      int64_t chunks_total = 0;
      if (Status s = count_cu_seqlens_chunks(
              entries, [&](int64_t i) { return index_at(cu_seqlens, i); }, d.BT, &chunks_total);
          !s.ok()) {
        return s;
      }
      if (const int64_t last = index_at(cu_seqlens, entries - 1); last != d.T) {
        return fail("cu_seqlens", "expected the last entry to equal T = " + std::to_string(d.T) +
                                      ", got " + std::to_string(last));
      }
      d.NT = chunks_total;
      if (!chunk_indices.empty_arg() && chunk_indices.shape[0] != d.NT) {
        return fail("chunk_indices", "expected shape [NT, 2] = [" + std::to_string(d.NT) +
                                         ", 2] (NT from cu_seqlens), got " +
                                         shape_str(chunk_indices));
      }
    } else {
      // Device-resident indices: the contents are checked by the kernel (docs/design.md); the
      // chunk count comes from chunk_indices when given, else from h.
      d.NT = chunk_indices.empty_arg() ? h.shape[1] : chunk_indices.shape[0];
    }
  }
  const int64_t hB = d.varlen ? 1 : d.B;
  const std::vector<int64_t> shape_h = state_v_first
                                           ? std::vector<int64_t>{hB, d.NT, d.HV, d.V, d.K}
                                           : std::vector<int64_t>{hB, d.NT, d.HV, d.K, d.V};
  const char* sym_h = state_v_first ? "[B, NT, HV, V, K] (state_v_first)" : "[B, NT, HV, K, V]";
  for (auto [name, view] : {std::pair{"h", &h}, {"dh", &dh}}) {
    if (Status s = check_shape(name, *view, shape_h, sym_h); !s.ok()) return s;
  }
  if (d.varlen && !chunk_indices.empty_arg() && chunk_indices.device.type == DeviceType::cpu) {
    if (Status s = check_chunk_indices(cu_seqlens, chunk_indices, d.BT); !s.ok()) {
      return s;
    }
  }
  if (out) *out = d;
  return Status::Ok();
}

std::string Problem::describe() const {
  std::ostringstream os;
  auto line = [&](const char* name, const TensorView& t) {
    os << "  " << name << ": " << (t.empty_arg() ? std::string("None") : t.describe()) << "\n";
  };
  os << "chunk_kda_bwd_wy_dqkg_fused problem\n";
  line("q", q);
  line("k", k);
  line("v", v);
  line("v_new", v_new);
  line("g", g);
  line("beta", beta);
  line("A", A);
  line("h", h);
  line("do", do_);
  line("dh", dh);
  line("dv", dv);
  line("cu_seqlens", cu_seqlens);
  line("chunk_indices", chunk_indices);
  line("dq", dq);
  line("dk", dk);
  line("dv_out", dv_out);
  line("db", db);
  line("dg", dg);
  line("dA", dA);
  os << "  scale: " << (scale ? std::to_string(*scale) : std::string("None (K ** -0.5)")) << "\n";
  os << "  chunk_size: " << chunk_size << "\n";
  os << "  state_v_first: " << (state_v_first ? "true" : "false") << "\n";
  return os.str();
}

}  // namespace kda
