// The recurrence of one (sequence, value head) chunk by chunk, in float64, staged as fla's chunked
// backward stages it (layer_reference.hpp, chunked_recurrence). The forward: per chunk the
// cumulative gate G, Akk = (I + M)⁻¹, Aqk, w, u, v_new and the state scan. The backward, chunks in
// reverse: dAv, the reverse state scan (dh, dv2), then SPEC.md's steps (the WY operator) and
// SPEC-chunk-bwd-intra.md's steps (the intra operator), then the reverse cumsum of dg. Decays are
// natural-log here: exp(G) stands for the operators' exp2 of a log2 G, and their dg convention
// (the gradient by the natural-log cumulative gate) is this file's plain derivative.

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/reference_matrix.hpp"
#include "ops/chunk_bwd_epilogue/chunk_math.hpp"
#include "ops/chunk_kda/layer_reference.hpp"

namespace kda::layer {

namespace {

namespace epilogue = kda::detail::epilogue;

using kda::detail::reference::hadamard;
using kda::detail::reference::matmul;
using kda::detail::reference::Matrix;
using kda::detail::reference::row_scaled;
using kda::detail::reference::transposed;

// Rows t0 .. t0+L-1 of a row-major [len, cols] array.
Matrix rows_of(const std::vector<double>& x, int64_t t0, int64_t L, int64_t cols) {
  Matrix m(L, cols);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t c = 0; c < cols; ++c) m(i, c) = x[(t0 + i) * cols + c];
  return m;
}

// One chunk's forward quantities, kept for its backward.
struct Chunk {
  int64_t t0 = 0, L = 0;
  Matrix Q, Kk, Vv, dO, beta;  // rows of the inputs
  Matrix G;                    // L x K cumulative natural-log gate
  Matrix E;                    // exp(G)
  Matrix Akk;                  // L x L (I + M)⁻¹, unit lower triangular
  Matrix Aqk;                  // L x L lower-inclusive, scale included
  Matrix w;                    // L x K
  Matrix S;                    // K x V the state at the chunk's start (fla's h)
  Matrix Vn;                   // L x V v_new
};

// exp(G[i] − G[j]) summed against a · b over channels: Σ_c a(i, c) b(j, c) exp(G(i,c) − G(j,c)).
double decayed_dot(const Matrix& a, int64_t i, const Matrix& b, int64_t j, const Matrix& G) {
  double sum = 0.0;
  for (int64_t c = 0; c < G.cols; ++c) sum += a(i, c) * b(j, c) * std::exp(G(i, c) - G(j, c));
  return sum;
}

// The forward of one chunk from its start state S; returns the state after it.
Matrix forward_chunk(Chunk& c, const HeadSequence& s, double scale, Matrix S,
                     HeadSequenceGradients& r) {
  const int64_t L = c.L, K = s.K, V = s.V;
  c.Q = rows_of(s.q, c.t0, L, K);
  c.Kk = rows_of(s.k, c.t0, L, K);
  c.Vv = rows_of(s.v, c.t0, L, V);
  c.dO = rows_of(s.do_, c.t0, L, V);
  c.beta = rows_of(s.beta, c.t0, L, 1);
  c.G = Matrix(L, K);
  c.E = Matrix(L, K);
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t k = 0; k < K; ++k) {
      c.G(i, k) = (i > 0 ? c.G(i - 1, k) : 0.0) + s.gate[(c.t0 + i) * K + k];
      c.E(i, k) = std::exp(c.G(i, k));
    }
  }
  // M[i][j] = β_i ⟨k_i, k_j ⊙ exp(G_i − G_j)⟩ below the diagonal; Akk = (I + M)⁻¹ by forward
  // substitution, row by row.
  c.Akk = Matrix(L, L);
  for (int64_t i = 0; i < L; ++i) {
    c.Akk(i, i) = 1.0;
    for (int64_t m = 0; m < i; ++m) {
      const double M_im = c.beta(i, 0) * decayed_dot(c.Kk, i, c.Kk, m, c.G);
      for (int64_t j = 0; j <= m; ++j) c.Akk(i, j) -= M_im * c.Akk(m, j);
    }
  }
  c.Aqk = Matrix(L, L);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j <= i; ++j) c.Aqk(i, j) = scale * decayed_dot(c.Q, i, c.Kk, j, c.G);
  // w = Akk (β ⊙ k ⊙ E), u = Akk (β ⊙ v), v_new = u − w S.
  c.w = matmul(c.Akk, row_scaled(hadamard(c.Kk, c.E), c.beta));
  const Matrix u = matmul(c.Akk, row_scaled(c.Vv, c.beta));
  const Matrix wS = matmul(c.w, S);
  c.Vn = u;
  for (size_t n = 0; n < c.Vn.values.size(); ++n) c.Vn.values[n] -= wS.values[n];
  // o = scale (Q ⊙ E) S + Aqk v_new.
  const Matrix o_state = matmul(hadamard(c.Q, c.E), S);
  const Matrix o_intra = matmul(c.Aqk, c.Vn);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < V; ++j) r.o[(c.t0 + i) * V + j] = scale * o_state(i, j) + o_intra(i, j);
  // S_next = diag(exp(Gn)) S + Σ_j (k_j ⊙ exp(Gn − G_j)) v_new_jᵀ.
  Matrix next(K, V);
  for (int64_t k = 0; k < K; ++k) {
    const double gn = c.G(L - 1, k);
    for (int64_t j = 0; j < V; ++j) {
      double sum = std::exp(gn) * S(k, j);
      for (int64_t i = 0; i < L; ++i) sum += c.Kk(i, k) * std::exp(gn - c.G(i, k)) * c.Vn(i, j);
      next(k, j) = sum;
    }
  }
  c.S = std::move(S);
  return next;
}

// The backward of one chunk from dS_end, the gradient by the state after it; writes the chunk's
// rows of r and returns the gradient by the state at its start.
Matrix backward_chunk(const Chunk& c, const HeadSequence& s, double scale, const Matrix& dS_end,
                      HeadSequenceGradients& r) {
  const int64_t L = c.L, K = s.K, V = s.V;
  // dAv's intra-chunk dv = Aqkᵀ do.
  Matrix dv2 = matmul(transposed(c.Aqk), c.dO);
  // The reverse scan: dv2 = dv_intra + (k ⊙ exp(Gn − G)) dS_end; dS_start = diag(exp(Gn)) dS_end
  // + scale (Q ⊙ E)ᵀ do − wᵀ dv2.
  Matrix to_end(L, K);  // exp(Gn − G): the decay from each row to the chunk's end
  for (int64_t i = 0; i < L; ++i)
    for (int64_t k = 0; k < K; ++k) to_end(i, k) = std::exp(c.G(L - 1, k) - c.G(i, k));
  const Matrix carried = matmul(hadamard(c.Kk, to_end), dS_end);
  for (size_t n = 0; n < dv2.values.size(); ++n) dv2.values[n] += carried.values[n];
  for (int64_t i = 0; i < L; ++i)
    for (int64_t v = 0; v < V; ++v) r.dv_scan[(c.t0 + i) * V + v] = dv2(i, v);
  Matrix dS_start = matmul(transposed(hadamard(c.Q, c.E)), c.dO);
  const Matrix wT_dv2 = matmul(transposed(c.w), dv2);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < V; ++j)
      dS_start(k, j) =
          std::exp(c.G(L - 1, k)) * dS_end(k, j) + scale * dS_start(k, j) - wT_dv2(k, j);

  // The epilogue: SPEC.md's and SPEC-chunk-bwd-intra.md's steps and the reverse cumsum.
  epilogue::ChunkInputs in{c.Q, c.Kk, c.Vv, c.dO, c.beta, c.G, c.Akk, c.S, dS_end, c.Vn, dv2};
  const epilogue::ChunkGradients grads = epilogue::epilogue_chunk(in, scale);
  for (int64_t i = 0; i < L; ++i) {
    const int64_t t = c.t0 + i;
    for (int64_t k = 0; k < K; ++k) {
      r.dq[t * K + k] = grads.dq(i, k);
      r.dk[t * K + k] = grads.dk(i, k);
      r.dgate[t * K + k] = grads.dgate(i, k);
    }
    for (int64_t v = 0; v < V; ++v) r.dv[t * V + v] = grads.dv(i, v);
    r.dbeta[t] = grads.dbeta(i, 0);
  }
  return dS_start;
}

}  // namespace

HeadSequenceGradients chunked_recurrence(const HeadSequence& s, double scale, int64_t chunk_size) {
  const int64_t K = s.K, V = s.V;
  HeadSequenceGradients r(s);

  std::vector<Chunk> chunks;
  for (int64_t t0 = 0; t0 < s.len; t0 += chunk_size) {
    Chunk c;
    c.t0 = t0;
    c.L = std::min(chunk_size, s.len - t0);
    chunks.push_back(std::move(c));
  }
  const size_t KV = static_cast<size_t>(K * V);
  Matrix S(K, V);
  S.values = s.S0;
  r.Akk.assign(static_cast<size_t>(s.len * chunk_size), 0.0);
  r.Aqk.assign(r.Akk.size(), 0.0);
  r.v_new.assign(static_cast<size_t>(s.len * V), 0.0);
  r.S.assign(chunks.size() * KV, 0.0);
  for (size_t n = 0; n < chunks.size(); ++n) {
    Chunk& c = chunks[n];
    S = forward_chunk(c, s, scale, std::move(S), r);
    // The stage tensors the backward's operators read: Akk's and Aqk's rows, v_new, the state at
    // the chunk's start.
    std::copy(c.S.values.begin(), c.S.values.end(), r.S.begin() + static_cast<ptrdiff_t>(n * KV));
    for (int64_t i = 0; i < c.L; ++i) {
      for (int64_t j = 0; j < c.L; ++j) {
        r.Akk[(c.t0 + i) * chunk_size + j] = c.Akk(i, j);
        r.Aqk[(c.t0 + i) * chunk_size + j] = c.Aqk(i, j);
      }
      for (int64_t v = 0; v < V; ++v) r.v_new[(c.t0 + i) * V + v] = c.Vn(i, v);
    }
  }
  r.S_T = S.values;

  Matrix dS(K, V);
  dS.values = s.dS_T;
  r.dS.assign(chunks.size() * KV, 0.0);
  r.dv_scan.assign(static_cast<size_t>(s.len * V), 0.0);
  for (size_t n = chunks.size(); n-- > 0;) {
    std::copy(dS.values.begin(), dS.values.end(), r.dS.begin() + static_cast<ptrdiff_t>(n * KV));
    dS = backward_chunk(chunks[n], s, scale, dS, r);
  }
  r.dS0 = std::move(dS.values);
  return r;
}

}  // namespace kda::layer
