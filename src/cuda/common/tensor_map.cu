// cuTensorMapEncodeTiled through the runtime's driver entry point, so that the library does not
// link libcuda itself (the driver is loaded by the CUDA runtime already), behind a per-thread
// cache: an encoding costs about half a microsecond of host time and an operator needs up to 14
// per call, while a training loop passes the same buffers (the caching allocator's) every step.

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <array>
#include <cstring>
#include <functional>
#include <unordered_map>

#include "cuda/common/tensor_map.hpp"

namespace kda::cuda {

namespace {

static_assert(sizeof(CUtensorMap) == sizeof(TensorMapBytes), "a CUtensorMap is 128 bytes");
static_assert(alignof(TensorMapBytes) >= 64, "tensor maps are 64-byte aligned");

// The driver's encoder, looked up once; nullptr when the driver does not have it.
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // leave no sticky error for the caller's next check
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// Everything an encoding depends on.
using MapKey = std::array<uint64_t, 13>;

struct MapKeyHash {
  size_t operator()(const MapKey& key) const {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t word : key) h = (h ^ word) * 0x100000001b3ull;
    return std::hash<uint64_t>{}(h);
  }
};

// Bounded: cleared when it holds this many maps (a model's layers times the operators' maps).
constexpr size_t kMaxCachedMaps = 4096;

// One encoding by the driver; false when the rules or the driver refuse it.
bool encode_uncached(TensorMapBytes* map, const void* data, int elem_bytes, bool is_float16,
                     const uint64_t (&dims)[4], const uint64_t (&strides)[3],
                     const uint32_t (&box)[4], TileSwizzle swizzle) {
  if (!tile_map_supported(data, elem_bytes, dims, strides, box, swizzle)) return false;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encoder();
  if (encode == nullptr) return false;
  const CUtensorMapDataType type = elem_bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : is_float16    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                   : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const cuuint64_t global_dims[4] = {dims[0], dims[1], dims[2], dims[3]};
  const cuuint64_t global_strides[3] = {strides[0], strides[1], strides[2]};
  const cuuint32_t box_dims[4] = {box[0], box[1], box[2], box[3]};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap encoded;
  const CUresult r = encode(
      &encoded, type, 4, const_cast<void*>(data), global_dims, global_strides, box_dims,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      swizzle == TileSwizzle::bytes128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return false;
  std::memcpy(map->words, &encoded, sizeof(encoded));
  return true;
}

}  // namespace

bool tile_map_supported(const void* data, int elem_bytes, const uint64_t (&dims)[4],
                        const uint64_t (&strides)[3], const uint32_t (&box)[4],
                        TileSwizzle swizzle) {
  if (elem_bytes != 2 && elem_bytes != 4) return false;
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0) return false;
  for (uint64_t s : strides) {
    if (s % 16 != 0 || s >= (uint64_t{1} << 40)) return false;
  }
  for (int d = 0; d < 4; ++d) {
    if (dims[d] == 0 || dims[d] > (uint64_t{1} << 32) || box[d] == 0 || box[d] > 256) return false;
  }
  // With the 128-byte swizzle a box row must fit the swizzle's 128-byte span.
  if (swizzle == TileSwizzle::bytes128 && box[0] * elem_bytes > 128) return false;
  return box[0] * elem_bytes % 16 == 0;
}

bool encode_tile_map_4d(TensorMapBytes* map, const void* data, int elem_bytes, bool is_float16,
                        const uint64_t (&dims)[4], const uint64_t (&strides)[3],
                        const uint32_t (&box)[4], TileSwizzle swizzle) {
  thread_local std::unordered_map<MapKey, TensorMapBytes, MapKeyHash> cache;
  const MapKey key = {reinterpret_cast<uintptr_t>(data),
                      static_cast<uint64_t>(elem_bytes) << 2 | (is_float16 ? 2u : 0u) |
                          (swizzle == TileSwizzle::bytes128 ? 1u : 0u),
                      dims[0],
                      dims[1],
                      dims[2],
                      dims[3],
                      strides[0],
                      strides[1],
                      strides[2],
                      box[0],
                      box[1],
                      box[2],
                      box[3]};
  if (auto it = cache.find(key); it != cache.end()) {
    *map = it->second;
    return true;
  }
  if (!encode_uncached(map, data, elem_bytes, is_float16, dims, strides, box, swizzle)) {
    return false;
  }
  if (cache.size() >= kMaxCachedMaps) cache.clear();
  cache.emplace(key, *map);
  return true;
}

}  // namespace kda::cuda
