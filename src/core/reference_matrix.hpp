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

// a · b.
inline Matrix matmul(const Matrix& a, const Matrix& b) {
  Matrix c(a.rows, b.cols);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t m = 0; m < a.cols; ++m)
      for (int64_t j = 0; j < b.cols; ++j) c(i, j) += a(i, m) * b(m, j);
  return c;
}

// aᵀ.
inline Matrix transposed(const Matrix& a) {
  Matrix t(a.cols, a.rows);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) t(j, i) = a(i, j);
  return t;
}

// a ⊙ s, elementwise (same shapes).
inline Matrix hadamard(const Matrix& a, const Matrix& s) {
  Matrix c = a;
  for (size_t n = 0; n < c.values.size(); ++n) c.values[n] *= s.values[n];
  return c;
}

// Row i of `a` times column(i, 0): diag(column) · a.
inline Matrix row_scaled(const Matrix& a, const Matrix& column) {
  Matrix c = a;
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) c(i, j) *= column(i, 0);
  return c;
}

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

// The K x V state at (batch, chunk, head) of a per-chunk [B, NT, heads, K, V] view, or of a
// [.., V, K] one when state_v_first (then S[k][v] = t[batch, chunk, head, v, k]).
inline Matrix load_state(const TensorView& t, int64_t batch, int64_t chunk, int64_t head, int64_t K,
                         int64_t V, bool state_v_first) {
  Matrix m(K, V);
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t v = 0; v < V; ++v) {
      const int64_t offset = state_v_first ? offset_of(t, batch, chunk, head, v, k)
                                           : offset_of(t, batch, chunk, head, k, v);
      m(k, v) = load_double(t, offset);
    }
  }
  return m;
}

}  // namespace kda::detail::reference
