// The tensor-core path's entry points: which problems it takes (fast_path_supports) and the
// dispatch of runtime options (X dtype, h dtype, chunk size, V, state_v_first) to one compiled
// kernel (launch_fast_path).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/fast/fast_path.hpp"
#include "cuda/fast/wy_dqkg_mma_launch.hpp"
#include "cuda/wy_dqkg_make_params.hpp"
#include "cuda/wy_dqkg_params.hpp"

namespace kda::detail {

namespace {

using cuda::WyDqkgParams;

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

template <typename XT, typename HT, int kBT, int kV>
Status dispatch_layout(const WyDqkgParams& params, bool state_v_first, int device,
                       cudaStream_t stream) {
  if (state_v_first) return cuda::launch_wy_dqkg_mma<XT, HT, kBT, kV, true>(params, device, stream);
  return cuda::launch_wy_dqkg_mma<XT, HT, kBT, kV, false>(params, device, stream);
}

template <typename XT, typename HT, int kBT>
Status dispatch_v(const WyDqkgParams& params, const Problem& p, const Dims& d, int device,
                  cudaStream_t stream) {
  switch (d.V) {
    case 64:
      return dispatch_layout<XT, HT, kBT, 64>(params, p.state_v_first, device, stream);
    case 128:
      return dispatch_layout<XT, HT, kBT, 128>(params, p.state_v_first, device, stream);
    default:
      return {StatusCode::internal,
              "cuda mma path: no kernel for V = " + std::to_string(d.V) + " (64, 128)"};
  }
}

template <typename XT, typename HT>
Status dispatch_chunk_size(const WyDqkgParams& params, const Problem& p, const Dims& d, int device,
                           cudaStream_t stream) {
  switch (d.BT) {
    case 16:
      return dispatch_v<XT, HT, 16>(params, p, d, device, stream);
    case 32:
      return dispatch_v<XT, HT, 32>(params, p, d, device, stream);
    case 64:
      return dispatch_v<XT, HT, 64>(params, p, d, device, stream);
    default:
      return {StatusCode::internal,
              "cuda mma path: no kernel for chunk_size " + std::to_string(d.BT) + " (16, 32, 64)"};
  }
}

template <typename XT>
Status dispatch_h_dtype(const WyDqkgParams& params, const Problem& p, const Dims& d, int device,
                        cudaStream_t stream) {
  if (d.h_dtype == DType::f32) return dispatch_chunk_size<XT, float>(params, p, d, device, stream);
  if (d.h_dtype == d.x_dtype) return dispatch_chunk_size<XT, XT>(params, p, d, device, stream);
  return {StatusCode::internal, "cuda mma path: no kernel for h dtype " +
                                    std::string(dtype_name(d.h_dtype)) + " with X dtype " +
                                    std::string(dtype_name(d.x_dtype))};
}

}  // namespace

bool fast_path_supports(const Problem& p, const Dims& d) {
  if (d.x_dtype != DType::f16 && d.x_dtype != DType::bf16) return false;
  if (d.h_dtype != DType::f32 && d.h_dtype != d.x_dtype) return false;
  if (d.K != 64 && d.K != 128) return false;
  if (d.V != 64 && d.V != 128) return false;
  if (d.BT != 16 && d.BT != 32 && d.BT != 64) return false;
  for (const TensorView* t : {&p.q, &p.k, &p.v, &p.v_new, &p.do_, &p.dv, &p.g, &p.A, &p.h, &p.dh}) {
    if (!rows_of_chunks(*t)) return false;
  }
  // Outputs are contiguous (validated) with rows of K, V or BT >= 16 elements: their rows are
  // 16-byte aligned when the data pointers are.
  for (const TensorView* t : {&p.dq, &p.dk, &p.dg, &p.dA, &p.dv_out}) {
    if (!aligned(t->data)) return false;
  }
  return true;
}

Status launch_fast_path(const Problem& p, const Dims& d, cudaStream_t stream) {
  if (!fast_path_supports(p, d)) {
    return {StatusCode::internal, "cuda mma path: launched for a problem it does not support"};
  }
  const WyDqkgParams params = cuda::make_wy_dqkg_params(p, d);
  const int device = p.q.device.index;
  switch (d.x_dtype) {
    case DType::f16:
      return dispatch_h_dtype<__half>(params, p, d, device, stream);
    case DType::bf16:
      return dispatch_h_dtype<__nv_bfloat16>(params, p, d, device, stream);
    default:
      return {StatusCode::internal,
              "cuda mma path: no kernel for X dtype " + std::string(dtype_name(d.x_dtype))};
  }
}

}  // namespace kda::detail
