// The epilogue's math for one (chunk, value head) (chunk_math.hpp): each block names the SPEC
// step it is.

#include "ops/chunk_bwd_epilogue/chunk_math.hpp"

#include <cmath>

namespace kda::detail::epilogue {

using reference::hadamard;
using reference::matmul;
using reference::row_scaled;
using reference::transposed;

ChunkGradients epilogue_chunk(const ChunkInputs& in, double scale) {
  const int64_t L = in.Q.rows, K = in.Q.cols, V = in.Vv.cols;
  Matrix E(L, K), to_end(L, K);  // exp(G); exp(Gn − G), the decay to the chunk's end
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t k = 0; k < K; ++k) {
      E(i, k) = std::exp(in.G(i, k));
      to_end(i, k) = std::exp(in.G(L - 1, k) - in.G(i, k));
    }
  }
  // dAv's dAqk, as the intra operator reads it: Pq = scale · do v_newᵀ, lower-inclusive.
  Matrix Pq(L, L);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += in.dO(i, v) * in.Vn(j, v);
      Pq(i, j) = scale * sum;
    }

  // SPEC.md steps 1..12 (S = h; dS = dh, the gradient by the state after the chunk; dV, the
  // reverse scan's dv).
  const Matrix& S = in.S;
  Matrix dQ = hadamard(matmul(in.dO, transposed(S)), E);  // 1
  for (double& x : dQ.values) x *= scale;
  const Matrix dK0 = hadamard(matmul(in.Vn, transposed(in.dS)), to_end);  // 2
  Matrix dW = matmul(in.dV, transposed(S));                               // 3
  for (double& x : dW.values) x = -x;
  const Matrix AkkT = transposed(in.Akk);
  const Matrix dvb = matmul(AkkT, in.dV);  // 4
  const Matrix dv_out = row_scaled(dvb, in.beta);
  const Matrix KG = hadamard(in.Kk, E);  // 5
  const Matrix dkgb = matmul(AkkT, dW);
  Matrix db(L, 1);  // 6
  for (int64_t i = 0; i < L; ++i) {
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) sum += dvb(i, v) * in.Vv(i, v);
    for (int64_t k = 0; k < K; ++k) sum += dkgb(i, k) * KG(i, k);
    db(i, 0) = sum;
  }
  Matrix dk = dK0;  // 7
  for (int64_t i = 0; i < L; ++i)
    for (int64_t k = 0; k < K; ++k) dk(i, k) += dkgb(i, k) * E(i, k) * in.beta(i, 0);
  Matrix dg(L, K);  // 9 (with 8's dgk on the last row)
  for (int64_t i = 0; i < L; ++i)
    for (int64_t k = 0; k < K; ++k)
      dg(i, k) =
          in.Q(i, k) * dQ(i, k) - in.Kk(i, k) * dK0(i, k) + KG(i, k) * dkgb(i, k) * in.beta(i, 0);
  for (int64_t k = 0; k < K; ++k) {
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) sum += S(k, v) * in.dS(k, v);
    double keys = 0.0;
    for (int64_t i = 0; i < L; ++i) keys += in.Kk(i, k) * dK0(i, k);
    dg(L - 1, k) += std::exp(in.G(L - 1, k)) * sum + keys;
  }
  // 11, 12: D = dV Vᵀ + dW KGᵀ; X = D ⊙ β_j strictly below the diagonal; dAkk = −Akkᵀ X Akkᵀ.
  const Matrix D = [&] {
    Matrix a = matmul(in.dV, transposed(in.Vv));
    const Matrix b = matmul(dW, transposed(KG));
    for (size_t n = 0; n < a.values.size(); ++n) a.values[n] += b.values[n];
    return a;
  }();
  Matrix X(L, L);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < i; ++j) X(i, j) = D(i, j) * in.beta(j, 0);
  const Matrix AXA = matmul(matmul(AkkT, X), AkkT);
  Matrix Pk(L, L);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < i; ++j) Pk(i, j) = -AXA(i, j);

  // SPEC-chunk-bwd-intra.md steps 1..8 (Pq, Pk lower-inclusive; D_ij = exp(G_i − G_j)).
  Matrix dqa(L, K), rr(L, K), dkc(L, K);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j <= i; ++j)
      for (int64_t k = 0; k < K; ++k) {
        const double d = std::exp(in.G(i, k) - in.G(j, k));
        dqa(i, k) += Pq(i, j) * in.Kk(j, k) * d;                                            // 1
        rr(i, k) += Pk(i, j) * in.Kk(j, k) * d;                                             // 2
        dkc(j, k) += (Pq(i, j) * in.Q(i, k) + Pk(i, j) * in.beta(i, 0) * in.Kk(i, k)) * d;  // 5
      }
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t k = 0; k < K; ++k) {
      const double dkr = in.beta(i, 0) * rr(i, k);                           // 4
      db(i, 0) += rr(i, k) * in.Kk(i, k);                                    // 3
      dQ(i, k) += dqa(i, k);                                                 // 6
      dk(i, k) += dkr + dkc(i, k);                                           // 7
      dg(i, k) += in.Q(i, k) * dqa(i, k) + in.Kk(i, k) * (dkr - dkc(i, k));  // 8
    }
  }

  // The reverse cumsum: dg by the cumulative gate becomes dgate by each token's gate.
  ChunkGradients out;
  out.dq = std::move(dQ);
  out.dk = std::move(dk);
  out.dv = dv_out;
  out.dbeta = std::move(db);
  out.dgate = Matrix(L, K);
  for (int64_t k = 0; k < K; ++k) {
    double suffix = 0.0;
    for (int64_t i = L - 1; i >= 0; --i) out.dgate(i, k) = suffix += dg(i, k);
  }
  return out;
}

}  // namespace kda::detail::epilogue
