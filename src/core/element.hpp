#pragma once
// Host-side element access for CPU backends: half/bfloat16 conversion and strided loads/stores.

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kda/tensor.hpp"

namespace kda {

inline float f16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24
      const float f = std::ldexp(static_cast<float>(mant), -24);
      return sign ? -f : f;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, overflow to infinity, NaN kept quiet.
inline uint16_t float_to_f16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {                        // below the smallest normal: subnormal or 0
    const float a = std::fabs(f);
    const float scaled = a * 16777216.0f;  // units of 2^-24, exact
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

inline float bf16_bits_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

// Element offset of (i0, i1, i2, i3) in a rank-4 view (also rank 3 / 5 via the overloads).
inline int64_t offset_of(const TensorView& t, int64_t i0, int64_t i1, int64_t i2) {
  return i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2];
}
inline int64_t offset_of(const TensorView& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return offset_of(t, i0, i1, i2) + i3 * t.strides[3];
}
inline int64_t offset_of(const TensorView& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3,
                         int64_t i4) {
  return offset_of(t, i0, i1, i2, i3) + i4 * t.strides[4];
}

// Element (k, v) of a per-sequence state [N, HV, K, V] (sequence n, head hv), or of a per-chunk
// state [B, NT, HV, K, V] (batch row b, chunk c, head hv); both stored [.., V, K] when v_first.
inline int64_t state_offset(const TensorView& t, bool v_first, int64_t n, int64_t hv, int64_t k,
                            int64_t v) {
  return v_first ? offset_of(t, n, hv, v, k) : offset_of(t, n, hv, k, v);
}
inline int64_t state_offset(const TensorView& t, bool v_first, int64_t b, int64_t c, int64_t hv,
                            int64_t k, int64_t v) {
  return v_first ? offset_of(t, b, c, hv, v, k) : offset_of(t, b, c, hv, k, v);
}

inline double load_double(const TensorView& t, int64_t offset) {
  switch (t.dtype) {
    case DType::f16:
      return f16_bits_to_float(static_cast<const uint16_t*>(t.data)[offset]);
    case DType::bf16:
      return bf16_bits_to_float(static_cast<const uint16_t*>(t.data)[offset]);
    case DType::f32:
      return static_cast<const float*>(t.data)[offset];
    case DType::f64:
      return static_cast<const double*>(t.data)[offset];
    case DType::i32:
      return static_cast<const int32_t*>(t.data)[offset];
    case DType::i64:
      return static_cast<double>(static_cast<const int64_t*>(t.data)[offset]);
  }
  return NAN;
}

inline float load_float(const TensorView& t, int64_t offset) {
  return static_cast<float>(load_double(t, offset));
}

// Rounds once from float: a double is first rounded to float (the output dtypes are at most f32).
inline void store_float(const TensorView& t, int64_t offset, float value) {
  switch (t.dtype) {
    case DType::f16:
      static_cast<uint16_t*>(t.data)[offset] = float_to_f16_bits(value);
      return;
    case DType::bf16:
      static_cast<uint16_t*>(t.data)[offset] = float_to_bf16_bits(value);
      return;
    case DType::f32:
      static_cast<float*>(t.data)[offset] = value;
      return;
    case DType::f64:
      static_cast<double*>(t.data)[offset] = value;
      return;
    case DType::i32:
    case DType::i64:
      return;  // never an output dtype; validate() rejects it
  }
}

}  // namespace kda
