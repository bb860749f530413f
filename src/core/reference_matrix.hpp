#pragma once
// What every operator's float64 reference (cpu-ref) shares: a dense row-major float64 matrix and
// the moves of a chunk's rows between a strided [B, T, heads, cols] view and such a matrix.

#include <cstdint>
#include <vector>

#include "core/element.hpp"
#include "kda/tensor.hpp"

namespace kda::detail::reference {

// A dense row-major float64 matrix (a column vector when cols == 1).
struct Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<double> values;

  Matrix() = default;
  Matrix(int64_t r, int64_t c) : rows(r), cols(c), values(static_cast<size_t>(r * c), 0.0) {}
  double& operator()(int64_t i, int64_t j) { return values[static_cast<size_t>(i * cols + j)]; }
  double operator()(int64_t i, int64_t j) const {
    return values[static_cast<size_t>(i * cols + j)];
  }
};

// Rows t0 .. t0+L-1 of head `head` of a [B, T, heads, cols] view, honouring its strides.
inline Matrix load_rows(const TensorView& t, int64_t b, int64_t t0, int64_t L, int64_t head,
                        int64_t cols) {
  Matrix m(L, cols);
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t c = 0; c < cols; ++c) m(i, c) = load_double(t, offset_of(t, b, t0 + i, head, c));
  }
  return m;
}

// m's rows into rows t0 .. t0+m.rows-1 of head `head` of a [B, T, heads, cols] view, each value
// rounded to the view's dtype.
inline void store_rows(const TensorView& t, int64_t b, int64_t t0, int64_t head, const Matrix& m) {
  for (int64_t i = 0; i < m.rows; ++i) {
    for (int64_t c = 0; c < m.cols; ++c) {
      store_float(t, offset_of(t, b, t0 + i, head, c), static_cast<float>(m(i, c)));
    }
  }
}

}  // namespace kda::detail::reference
