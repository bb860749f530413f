// chunk_bwd_wy_dqkg's sm80_mma kernel: which problems it takes (sm80_mma_supports) and the
// dispatch of runtime options (X dtype, h dtype, chunk size, V, state_v_first) to one compiled
// kernel (launch_sm80_mma): the 16-bit kernel (wy_dqkg_mma_kernel) for float16/bfloat16 X, the
// 3xTF32 kernel (tf32x3/, wy_dqkg_tf32x3_kernel) for float32 X. Both are "sm80_mma" to users, as
// chunk_bwd_intra's float32 3xTF32 path is: one tensor-core kernel choice whatever the dtype.

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "cuda/common/dispatch.hpp"
#include "cuda/common/kernel_attributes.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/make_params.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/params.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm80_mma/dispatch.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm80_mma/launch.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/tf32x3/launch.hpp"

namespace kda::detail {

namespace {

// h or dh [B, NT, HV, K, V] float32 as a rank-4 map with B and NT flattened, for boxes of 16 k x V
// (one slab of the float32 staging); false when the layout does not allow it.
bool encode_slab_map(cuda::TensorMapBytes* map, const TensorView& t) {
  if (t.strides[4] != 1 || (t.shape[0] > 1 && t.strides[0] != t.shape[1] * t.strides[1])) {
    return false;
  }
  const uint64_t dims[4] = {static_cast<uint64_t>(t.shape[4]), static_cast<uint64_t>(t.shape[3]),
                            static_cast<uint64_t>(t.shape[2]),
                            static_cast<uint64_t>(t.shape[0] * t.shape[1])};
  const uint64_t strides[3] = {static_cast<uint64_t>(t.strides[3]) * 4,
                               static_cast<uint64_t>(t.strides[2]) * 4,
                               static_cast<uint64_t>(t.strides[1]) * 4};
  const uint32_t box[4] = {static_cast<uint32_t>(t.shape[4]), 16, 1, 1};
  return cuda::encode_tile_map_4d(map, t.data, 4, false, dims, strides, box);
}

constexpr uintptr_t kAlign = 16;  // cp.async copies 16-byte chunks

bool aligned(const void* data) {
  return reinterpret_cast<uintptr_t>(data) % kAlign == 0;
}

// Rows of 16-byte chunks: the last dimension contiguous, the data pointer and every other stride
// (in bytes) a multiple of 16. A dimension of extent 1 is only ever indexed at 0, so its stride
// does not matter.
bool rows_of_chunks(const TensorView& t) {
  if (!aligned(t.data)) return false;
  const int last = t.rank - 1;
  if (t.shape[last] > 1 && t.strides[last] != 1) return false;
  const auto element_bytes = static_cast<int64_t>(dtype_size(t.dtype));
  for (int d = 0; d < last; ++d) {
    if (t.shape[d] > 1 && (t.strides[d] * element_bytes) % static_cast<int64_t>(kAlign) != 0) {
      return false;
    }
  }
  return true;
}

// The first tensor whose per-unit offsets (LoopStrides: rows below BT of g, q, k, dq/dk/dg and
// dv_out; k < K and v < V of h, dh) do not fit in int32, or nullptr when all fit.
const char* offsets_over_32_bits(const ChunkBwdWyDqkgProblem& p, const ChunkBwdWyDqkgDims& d) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  auto span = [](int64_t stride, int64_t count) { return std::abs(stride) * (count - 1); };
  const std::pair<const char*, const TensorView*> tokens[] = {
      {"g", &p.g}, {"q", &p.q}, {"k", &p.k}};
  for (auto [name, t] : tokens) {
    if (span(t->strides[1], d.BT) + d.K > kMax) return name;
  }
  if (d.HV * d.K * d.BT > kMax) return "dq, dk, dg";
  if (d.HV * d.V * d.BT > kMax) return "dv_out";
  // h, dh [B, NT, HV, K, V] (or [.., V, K]): dimensions 3 and 4 are k and v in some order.
  const std::pair<const char*, const TensorView*> states[] = {{"h", &p.h}, {"dh", &p.dh}};
  for (auto [name, t] : states) {
    if (span(t->strides[3], t->shape[3]) + span(t->strides[4], t->shape[4]) + 1 > kMax) return name;
  }
  return nullptr;
}

// `reason` is a callable returning the wording, called only when a caller asked for it.
template <typename Reason>
bool refuse(std::string* why_not, const Reason& reason) {
  if (why_not != nullptr) *why_not = reason();
  return false;
}

// CTAs per unit for the split-unit kernel (BT = 64, h stored [K][V], 16-bit X): 4 or 2 (dividing
// the unit's slab pairs) when the split grid still fits one CTA per SM, so a problem with fewer
// units than SMs is not left to a few CTAs' serial chains; else 1 (one CTA per unit). One CTA
// per SM, not the two the kernel could hold: on an H200 a split grid of up
// to 132 CTAs ran in one wave (B=1 T=512 H=8: 26.5 -> 20.9 µs with 2 CTAs per unit), but every
// split grid of more CTAs than SMs was slower than no split (T=1024 H=8: 30.4 -> 32.6 µs at 256
// CTAs, 50.0 at 512). `requested` (WyCudaTuning::split_ranks, for tests and measurements)
// overrides the size rule: 1 never splits, 2 or 4 split into the largest of 4, 2 not above it
// that divides the slab pairs, 0 is the rule.
Status wy_split_ranks(const cuda::WyDqkgParams& params, int device, int requested, int* ranks) {
  constexpr int kCtasPerSm = 1;
  const int64_t num_slabs = params.K / cuda::kSplitSlabK;
  const bool by_size = requested == 0;
  const int at_most = by_size ? 4 : requested;
  int slots = 0;
  if (by_size) {
    cuda::DeviceFacts facts;
    if (Status s = cuda::device_facts(device, &facts); !s.ok()) return s;
    slots = kCtasPerSm * facts.sms;
  }
  *ranks = 1;
  for (int n : {4, 2}) {
    if (n <= at_most && num_slabs % n == 0 && (!by_size || params.num_units * n <= slots)) {
      *ranks = n;
      break;
    }
  }
  return Status::Ok();
}

}  // namespace

bool sm80_mma_supports(const ChunkBwdWyDqkgProblem& p, const ChunkBwdWyDqkgDims& d,
                       std::string* why_not) {
  if (d.x_dtype != DType::f16 && d.x_dtype != DType::bf16 && d.x_dtype != DType::f32) {
    return refuse(why_not, [&] {
      return "X is " + std::string(dtype_name(d.x_dtype)) +
             " (it takes float16, bfloat16 and float32)";
    });
  }
  if (d.h_dtype != DType::f32 && d.h_dtype != d.x_dtype) {
    return refuse(why_not,
                  [&] { return "h is " + std::string(dtype_name(d.h_dtype)) + " (float32 or X)"; });
  }
  if (d.K != 64 && d.K != 128) {
    return refuse(why_not, [&] { return "K = " + std::to_string(d.K) + " (it takes 64 and 128)"; });
  }
  if (d.V != 64 && d.V != 128) {
    return refuse(why_not, [&] { return "V = " + std::to_string(d.V) + " (it takes 64 and 128)"; });
  }
  // The tensors copied as rows of 16-byte chunks (beta and the index tensors are read element by
  // element).
  const std::pair<const char*, const TensorView*> rows[] = {
      {"q", &p.q},   {"k", &p.k}, {"v", &p.v}, {"v_new", &p.v_new}, {"do", &p.do_},
      {"dv", &p.dv}, {"g", &p.g}, {"A", &p.A}, {"h", &p.h},         {"dh", &p.dh}};
  for (auto [name, t] : rows) {
    if (!rows_of_chunks(*t)) {
      return refuse(why_not, [&] {
        return std::string(name) +
               " is not in rows of 16-byte chunks (last dimension contiguous, pointer and other "
               "strides 16-byte aligned)";
      });
    }
  }
  // The kernels' K loops form offsets from the unit's origin in 32 bits (cuda::LoopStrides): row
  // (< BT) times a token stride plus a column, and h's k (< K) and v (< V) times its strides.
  if (const char* what = offsets_over_32_bits(p, d)) {
    return refuse(why_not, [&] {
      return std::string(what) + " reaches past 2^31 - 1 elements from a chunk's first row (the " +
             "kernel's offsets are 32-bit)";
    });
  }
  // Outputs are contiguous (validated) with rows of K, V or BT >= 16 elements: their rows are
  // 16-byte aligned when the data pointers are.
  for (const auto& a : ChunkBwdWyDqkgProblem::args()) {
    if (a.info.role == ArgRole::output && !aligned(a.of(p).data)) {
      return refuse(why_not, [&] { return std::string(a.info.name) + " is not 16-byte aligned"; });
    }
  }
  return true;
}

Status launch_sm80_mma(const ChunkBwdWyDqkgProblem& p, const ChunkBwdWyDqkgDims& d,
                       cudaStream_t stream, int split_ranks) {
  if (!sm80_mma_supports(p, d)) {
    return {StatusCode::internal, "cuda sm80_mma: launched for a problem it does not support"};
  }
  cuda::WyDqkgParams params = cuda::make_wy_dqkg_params(p, d);
  // The kernels with WyDqkgMmaTraits::kTmaSlab (16-bit X, float32 h stored [K][V], BT <= 32)
  // read these maps; where they are not encoded, those kernels copy by cp.async instead.
  if (d.BT <= 32 && !p.state_v_first && d.x_dtype != DType::f32 && d.h_dtype == DType::f32) {
    params.h_nt = p.h.shape[1];
    params.h_maps_ok = encode_slab_map(&params.h_map, p.h) && encode_slab_map(&params.dh_map, p.dh);
  }
  const int device = p.q.device.index;
  return cuda::dispatch_x_dtype(d.x_dtype, [&](auto x) {
    using XT = typename decltype(x)::type;
    if constexpr (std::is_same_v<XT, float>) {
      // float32 X (beta, h and dh are then float32 too): the 3xTF32 kernel.
      return cuda::dispatch_int<16, 32, 64>("chunk_size", d.BT, [&](auto bt) {
        return cuda::dispatch_int<64, 128>("V", d.V, [&](auto v) {
          return cuda::dispatch_bool(p.state_v_first, [&](auto svf) {
            return cuda::launch_wy_dqkg_tf32x3<decltype(bt)::value, decltype(v)::value,
                                               decltype(svf)::value>(params, device, stream);
          });
        });
      });
    } else {
      return cuda::dispatch_f32_or_x<XT>("h", d.h_dtype, d.x_dtype, [&](auto h) {
        using HT = typename decltype(h)::type;
        if (d.BT == 64 && !p.state_v_first) {
          int ranks = 1;
          if (Status s = wy_split_ranks(params, device, split_ranks, &ranks); !s.ok()) return s;
          if (ranks > 1) {
            return cuda::dispatch_int<64, 128>("V", d.V, [&](auto v) {
              return cuda::launch_wy_dqkg_mma_split<XT, HT, decltype(v)::value>(params, ranks,
                                                                                device, stream);
            });
          }
        }
        return cuda::dispatch_int<16, 32, 64>("chunk_size", d.BT, [&](auto bt) {
          return cuda::dispatch_int<64, 128>("V", d.V, [&](auto v) {
            return cuda::dispatch_bool(p.state_v_first, [&](auto svf) {
              return cuda::launch_wy_dqkg_mma<XT, HT, decltype(bt)::value, decltype(v)::value,
                                              decltype(svf)::value>(params, device, stream);
            });
          });
        });
      });
    }
  });
}

}  // namespace kda::detail
