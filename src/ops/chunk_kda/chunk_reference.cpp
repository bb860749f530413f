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
#include "ops/chunk_kda/layer_reference.hpp"

namespace kda::layer {

namespace {

using kda::detail::reference::Matrix;

// Rows t0 .. t0+L-1 of a row-major [len, cols] array.
Matrix rows_of(const std::vector<double>& x, int64_t t0, int64_t L, int64_t cols) {
  Matrix m(L, cols);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t c = 0; c < cols; ++c) m(i, c) = x[(t0 + i) * cols + c];
  return m;
}

Matrix matmul(const Matrix& a, const Matrix& b) {
  Matrix c(a.rows, b.cols);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t m = 0; m < a.cols; ++m)
      for (int64_t j = 0; j < b.cols; ++j) c(i, j) += a(i, m) * b(m, j);
  return c;
}

Matrix transposed(const Matrix& a) {
  Matrix t(a.cols, a.rows);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) t(j, i) = a(i, j);
  return t;
}

// Row i of `a` scaled by s(i, ·) elementwise: a ⊙ s.
Matrix hadamard(const Matrix& a, const Matrix& s) {
  Matrix c = a;
  for (size_t n = 0; n < c.values.size(); ++n) c.values[n] *= s.values[n];
  return c;
}

// Row i of `a` times beta(i).
Matrix row_scaled(const Matrix& a, const Matrix& beta) {
  Matrix c = a;
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) c(i, j) *= beta(i, 0);
  return c;
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
  // dAv: Pq = scale · do v_newᵀ (lower-inclusive; what fla's dAv hands the intra operator) and
  // the intra-chunk dv = Aqkᵀ do.
  Matrix Pq(L, L);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += c.dO(i, v) * c.Vn(j, v);
      Pq(i, j) = scale * sum;
    }
  Matrix dv2 = matmul(transposed(c.Aqk), c.dO);
  // The reverse scan: dv2 = dv_intra + (k ⊙ exp(Gn − G)) dS_end; dS_start = diag(exp(Gn)) dS_end
  // + scale (Q ⊙ E)ᵀ do − wᵀ dv2.
  Matrix to_end(L, K);  // exp(Gn − G): the decay from each row to the chunk's end
  for (int64_t i = 0; i < L; ++i)
    for (int64_t k = 0; k < K; ++k) to_end(i, k) = std::exp(c.G(L - 1, k) - c.G(i, k));
  const Matrix carried = matmul(hadamard(c.Kk, to_end), dS_end);
  for (size_t n = 0; n < dv2.values.size(); ++n) dv2.values[n] += carried.values[n];
  Matrix dS_start = matmul(transposed(hadamard(c.Q, c.E)), c.dO);
  const Matrix wT_dv2 = matmul(transposed(c.w), dv2);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < V; ++j)
      dS_start(k, j) =
          std::exp(c.G(L - 1, k)) * dS_end(k, j) + scale * dS_start(k, j) - wT_dv2(k, j);

  // SPEC.md steps 1..12 (S = h, dS = dh: the gradient by the state after the chunk, dV = dv2).
  const Matrix& S = c.S;
  Matrix dQ = hadamard(matmul(c.dO, transposed(S)), c.E);  // 1
  for (double& x : dQ.values) x *= scale;
  const Matrix dK0 = hadamard(matmul(c.Vn, transposed(dS_end)), to_end);  // 2
  Matrix dW = matmul(dv2, transposed(S));                                 // 3
  for (double& x : dW.values) x = -x;
  const Matrix AkkT = transposed(c.Akk);
  const Matrix dvb = matmul(AkkT, dv2);  // 4
  const Matrix dv_out = row_scaled(dvb, c.beta);
  const Matrix KG = hadamard(c.Kk, c.E);  // 5
  const Matrix dkgb = matmul(AkkT, dW);
  Matrix db(L, 1);  // 6
  for (int64_t i = 0; i < L; ++i) {
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) sum += dvb(i, v) * c.Vv(i, v);
    for (int64_t k = 0; k < K; ++k) sum += dkgb(i, k) * KG(i, k);
    db(i, 0) = sum;
  }
  Matrix dk = dK0;  // 7
  for (int64_t i = 0; i < L; ++i)
    for (int64_t k = 0; k < K; ++k) dk(i, k) += dkgb(i, k) * c.E(i, k) * c.beta(i, 0);
  Matrix dg(L, K);  // 9 (with 8's dgk on the last row)
  for (int64_t i = 0; i < L; ++i)
    for (int64_t k = 0; k < K; ++k)
      dg(i, k) =
          c.Q(i, k) * dQ(i, k) - c.Kk(i, k) * dK0(i, k) + KG(i, k) * dkgb(i, k) * c.beta(i, 0);
  for (int64_t k = 0; k < K; ++k) {
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) sum += S(k, v) * dS_end(k, v);
    double keys = 0.0;
    for (int64_t i = 0; i < L; ++i) keys += c.Kk(i, k) * dK0(i, k);
    dg(L - 1, k) += std::exp(c.G(L - 1, k)) * sum + keys;
  }
  // 11, 12: D = dV Vᵀ + dW KGᵀ; X = D ⊙ β_j strictly below the diagonal; dAkk = −Akkᵀ X Akkᵀ.
  const Matrix D = [&] {
    Matrix a = matmul(dv2, transposed(c.Vv));
    const Matrix b = matmul(dW, transposed(KG));
    for (size_t n = 0; n < a.values.size(); ++n) a.values[n] += b.values[n];
    return a;
  }();
  Matrix X(L, L);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < i; ++j) X(i, j) = D(i, j) * c.beta(j, 0);
  const Matrix AXA = matmul(matmul(AkkT, X), AkkT);
  Matrix Pk(L, L);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < i; ++j) Pk(i, j) = -AXA(i, j);

  // SPEC-chunk-bwd-intra.md steps 1..8 (Pq, Pk lower-inclusive; D_ij = exp(G_i − G_j)).
  Matrix dqa(L, K), rr(L, K), dkc(L, K);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j <= i; ++j)
      for (int64_t k = 0; k < K; ++k) {
        const double d = std::exp(c.G(i, k) - c.G(j, k));
        dqa(i, k) += Pq(i, j) * c.Kk(j, k) * d;                                          // 1
        rr(i, k) += Pk(i, j) * c.Kk(j, k) * d;                                           // 2
        dkc(j, k) += (Pq(i, j) * c.Q(i, k) + Pk(i, j) * c.beta(i, 0) * c.Kk(i, k)) * d;  // 5
      }
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t k = 0; k < K; ++k) {
      const double dkr = c.beta(i, 0) * rr(i, k);                          // 4
      db(i, 0) += rr(i, k) * c.Kk(i, k);                                   // 3
      dQ(i, k) += dqa(i, k);                                               // 6
      dk(i, k) += dkr + dkc(i, k);                                         // 7
      dg(i, k) += c.Q(i, k) * dqa(i, k) + c.Kk(i, k) * (dkr - dkc(i, k));  // 8
    }
  }

  // The rows of r; dg by the cumulative gate becomes dgate by each token's gate (reverse cumsum).
  for (int64_t i = 0; i < L; ++i) {
    const int64_t t = c.t0 + i;
    for (int64_t k = 0; k < K; ++k) {
      r.dq[t * K + k] = dQ(i, k);
      r.dk[t * K + k] = dk(i, k);
      double suffix = 0.0;
      for (int64_t m = i; m < L; ++m) suffix += dg(m, k);
      r.dgate[t * K + k] = suffix;
    }
    for (int64_t v = 0; v < V; ++v) r.dv[t * V + v] = dv_out(i, v);
    r.dbeta[t] = db(i, 0);
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
  Matrix S(K, V);
  S.values = s.S0;
  for (Chunk& c : chunks) S = forward_chunk(c, s, scale, std::move(S), r);
  r.S_T = S.values;

  Matrix dS(K, V);
  dS.values = s.dS_T;
  for (auto c = chunks.rbegin(); c != chunks.rend(); ++c) dS = backward_chunk(*c, s, scale, dS, r);
  r.dS0 = std::move(dS.values);
  return r;
}

}  // namespace kda::layer
