#pragma once
// Helpers shared by the fuzz targets: a check that aborts (so libFuzzer records the input as a
// crash), the poison bit patterns outputs are filled with before a run, and an element walker
// over a strided view.

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kda/tensor.hpp"

namespace kda::fuzz {

// Not assert(): it must stay on in every build type, and say which promise broke.
#define KDA_FUZZ_CHECK(cond, ...)                                                            \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "fuzz check failed at %s:%d: %s\n  ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                     \
      std::fprintf(stderr, "\n");                                                            \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

// Signalling NaNs: arithmetic never produces them (it quiets every NaN it returns, and the
// library's f16/bf16 rounding sets the quiet bit too), so an output element that still holds
// these bits after a run was never written.
inline constexpr uint32_t kPoisonF32 = 0x7fa5a5a5u;
inline constexpr uint16_t kPoisonF16 = 0x7d5au;   // exponent all ones, quiet bit (0x200) clear
inline constexpr uint16_t kPoisonBF16 = 0x7f8au;  // exponent all ones, quiet bit (0x40) clear

// Fills `count` elements of dtype `dtype` at `data` with the poison pattern.
inline void poison(void* data, DType dtype, int64_t count) {
  auto* bytes = static_cast<uint8_t*>(data);
  for (int64_t i = 0; i < count; ++i) {
    if (dtype == DType::f32) {
      std::memcpy(bytes + 4 * i, &kPoisonF32, 4);
    } else if (dtype == DType::f16) {
      std::memcpy(bytes + 2 * i, &kPoisonF16, 2);
    } else if (dtype == DType::bf16) {
      std::memcpy(bytes + 2 * i, &kPoisonBF16, 2);
    }
  }
}

inline bool is_poison(const void* element, DType dtype) {
  if (dtype == DType::f32) {
    uint32_t bits;
    std::memcpy(&bits, element, 4);
    return bits == kPoisonF32;
  }
  uint16_t bits;
  std::memcpy(&bits, element, 2);
  return bits == (dtype == DType::f16 ? kPoisonF16 : kPoisonBF16);
}

// Calls fn(offset) for the element offset of every multi-index of a view with non-negative
// extents (rank 0 is one element at offset 0).
template <typename Fn>
void for_each_offset(const TensorView& t, Fn&& fn) {
  if (t.numel() == 0) return;
  std::array<int64_t, kMaxRank> index{};
  for (;;) {
    int64_t offset = 0;
    for (int d = 0; d < t.rank; ++d) offset += index[d] * t.strides[d];
    fn(offset);
    int d = t.rank - 1;
    for (; d >= 0; --d) {
      if (++index[d] < t.shape[d]) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace kda::fuzz
