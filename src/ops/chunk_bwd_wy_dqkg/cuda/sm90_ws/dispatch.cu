// The sm90_ws kernel's dispatch: the opt-in (KDA_WY_V3), which problems it takes, and the bulk-copy
// maps of every tensor it stages.

#include "ops/chunk_bwd_wy_dqkg/cuda/sm90_ws/dispatch.hpp"

#include <cstdlib>
#include <string>

#include "cuda/common/dispatch.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm90_ws/launch.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm90_ws/maps.hpp"

namespace kda::detail {

namespace {

// The stride in bytes of dimension `dim` of `t`, or `fallback` when that dimension has extent 1
// (never stepped over, so any multiple of 16 serves the map).
uint64_t stride_bytes(const TensorView& t, int dim, int elem_bytes, uint64_t fallback) {
  return t.shape[dim] > 1 ? static_cast<uint64_t>(t.strides[dim]) * elem_bytes : fallback;
}

// A token tensor [B, T, heads, cols] as [1][B*T][heads][cols] for boxes of 64 rows x 128 bytes
// (128-byte swizzle); false when B and T cannot be flattened or the hardware refuses the layout.
bool encode_token_map(cuda::TensorMapBytes* map, const TensorView& t, bool is_float16) {
  const int eb = static_cast<int>(dtype_size(t.dtype));
  if (t.strides[3] != 1 && t.shape[3] > 1) return false;
  if (t.shape[0] > 1 && t.strides[0] != t.shape[1] * t.strides[1]) return false;
  const uint64_t cols = static_cast<uint64_t>(t.shape[3]);
  const uint64_t rows = static_cast<uint64_t>(t.shape[0] * t.shape[1]);
  const uint64_t head_stride = stride_bytes(t, 2, eb, cols * eb);
  const uint64_t row_stride = stride_bytes(t, 1, eb, head_stride * t.shape[2]);
  const uint64_t dims[4] = {cols, static_cast<uint64_t>(t.shape[2]), rows, 1};
  const uint64_t strides[3] = {head_stride, row_stride, row_stride * rows};
  const uint32_t box[4] = {static_cast<uint32_t>(128 / eb), 1, 64, 1};
  return cuda::encode_tile_map_4d(map, t.data, eb, is_float16, dims, strides, box,
                                  cuda::TileSwizzle::bytes128);
}

// h or dh [B, NT, HV, K, V] as [B*NT][HV][K][V] for boxes of 128 k x 128 bytes of v.
bool encode_state_map(cuda::TensorMapBytes* map, const TensorView& t, bool is_float16) {
  const int eb = static_cast<int>(dtype_size(t.dtype));
  if (t.strides[4] != 1) return false;
  if (t.shape[0] > 1 && t.strides[0] != t.shape[1] * t.strides[1]) return false;
  const uint64_t k_stride = static_cast<uint64_t>(t.strides[3]) * eb;
  const uint64_t head_stride = stride_bytes(t, 2, eb, k_stride * t.shape[3]);
  const uint64_t chunk_stride = stride_bytes(t, 1, eb, head_stride * t.shape[2]);
  const uint64_t dims[4] = {static_cast<uint64_t>(t.shape[4]), static_cast<uint64_t>(t.shape[3]),
                            static_cast<uint64_t>(t.shape[2]),
                            static_cast<uint64_t>(t.shape[0] * t.shape[1])};
  const uint64_t strides[3] = {k_stride, head_stride, chunk_stride};
  const uint32_t box[4] = {static_cast<uint32_t>(128 / eb), 128, 1, 1};
  return cuda::encode_tile_map_4d(map, t.data, eb, is_float16, dims, strides, box,
                                  cuda::TileSwizzle::bytes128);
}

}  // namespace

Status wy_v3_requested(bool* enabled) {
  *enabled = false;
  const char* env = std::getenv("KDA_WY_V3");
  if (env == nullptr || *env == '\0') return Status::Ok();
  const std::string value(env);
  if (value == "1") {
    *enabled = true;
  } else if (value != "0") {
    return invalid_argument("environment variable KDA_WY_V3: '" + value + "' is not 0 or 1");
  }
  return Status::Ok();
}

Status try_launch_sm90_ws(const ChunkBwdWyDqkgProblem& p, const ChunkBwdWyDqkgDims& d,
                          const cuda::WyDqkgParams& params, int device, cudaStream_t stream,
                          bool* launched) {
  *launched = false;
  const bool x16 = d.x_dtype == DType::f16 || d.x_dtype == DType::bf16;
  if (!x16 || d.BT != 64 || d.K != 128 || d.V != 128 || p.state_v_first ||
      (d.h_dtype != DType::f32 && d.h_dtype != d.x_dtype)) {
    return Status::Ok();
  }
  const bool f16 = d.x_dtype == DType::f16;
  const bool h16 = f16 && d.h_dtype == DType::f16;
  cuda::WyDqkgMaps maps;
  // The problem is of the kernel's shape: from here a tensor it cannot map is an error, not a
  // silent fallback, so that KDA_WY_V3=1 runs v3 or says why not.
  const struct {
    const char* name;
    cuda::TensorMapBytes* map;
    const TensorView* t;
    bool is_float16;
    bool state;
  } staged[] = {{"q", &maps.q, &p.q, f16, false},      {"k", &maps.k, &p.k, f16, false},
                {"v", &maps.v, &p.v, f16, false},      {"v_new", &maps.v_new, &p.v_new, f16, false},
                {"do", &maps.do_, &p.do_, f16, false}, {"dv", &maps.dv, &p.dv, f16, false},
                {"g", &maps.g, &p.g, false, false},    {"A", &maps.A, &p.A, f16, false},
                {"h", &maps.h, &p.h, h16, true},       {"dh", &maps.dh, &p.dh, h16, true}};
  for (const auto& s : staged) {
    const bool ok = s.state ? encode_state_map(s.map, *s.t, s.is_float16)
                            : encode_token_map(s.map, *s.t, s.is_float16);
    if (!ok) {
      return {StatusCode::unsupported,
              std::string("KDA_WY_V3=1: the sm90_ws kernel has no bulk-copy map for ") + s.name +
                  " (its batch and time dimensions must flatten, its last dimension be "
                  "contiguous, its other strides multiples of 16 bytes); unset KDA_WY_V3 to run "
                  "sm80_mma"};
    }
  }
  maps.h_nt = p.h.shape[1];
  *launched = true;
  return cuda::dispatch_x_dtype<false>(d.x_dtype, [&](auto x) {
    using XT = typename decltype(x)::type;
    return cuda::dispatch_f32_or_x<XT>("h", d.h_dtype, d.x_dtype, [&](auto h) {
      using HT = typename decltype(h)::type;
      return cuda::launch_wy_dqkg_ws<XT, HT>(params, maps, device, stream);
    });
  });
}

}  // namespace kda::detail
