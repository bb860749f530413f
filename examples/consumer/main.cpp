// Runs chunk_bwd_wy_dqkg on a small fixed-length problem through the installed C++ API on the
// cpu-ref backend and checks that every output element was written and is finite.
#include <cmath>
#include <cstdio>
#include <vector>

#include <kda/kda.hpp>

int main() {
  const int64_t B = 1, T = 20, H = 2, K = 8, V = 8, BT = 16, NT = 2;
  auto filled = [](size_t n, float base) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = base + 0.01f * static_cast<float>(i % 17);
    return x;
  };
  const size_t nk = B * T * H * K, nv = B * T * H * V;
  std::vector<float> q = filled(nk, 0.1f), k = filled(nk, 0.2f), v = filled(nv, 0.3f),
                     v_new = filled(nv, 0.1f), g = filled(nk, -0.5f),
                     beta = filled(B * T * H, 0.5f), A = filled(B * T * H * BT, 0.05f),
                     h = filled(B * NT * H * K * V, 0.2f), dout = filled(nv, 0.4f),
                     dh = filled(B * NT * H * K * V, 0.1f), dv = filled(nv, 0.3f);
  std::vector<float> dq(nk, NAN), dk(nk, NAN), dv_out(nv, NAN), db(B * T * H, NAN), dg(nk, NAN),
      dA(B * T * H * BT, NAN);
  using kda::DType;
  using kda::TensorView;
  kda::ChunkBwdWyDqkgProblem p;
  p.q = TensorView::contiguous(q.data(), DType::f32, {B, T, H, K});
  p.k = TensorView::contiguous(k.data(), DType::f32, {B, T, H, K});
  p.v = TensorView::contiguous(v.data(), DType::f32, {B, T, H, V});
  p.v_new = TensorView::contiguous(v_new.data(), DType::f32, {B, T, H, V});
  p.g = TensorView::contiguous(g.data(), DType::f32, {B, T, H, K});
  p.beta = TensorView::contiguous(beta.data(), DType::f32, {B, T, H});
  p.A = TensorView::contiguous(A.data(), DType::f32, {B, T, H, BT});
  p.h = TensorView::contiguous(h.data(), DType::f32, {B, NT, H, K, V});
  p.do_ = TensorView::contiguous(dout.data(), DType::f32, {B, T, H, V});
  p.dh = TensorView::contiguous(dh.data(), DType::f32, {B, NT, H, K, V});
  p.dv = TensorView::contiguous(dv.data(), DType::f32, {B, T, H, V});
  p.dq = TensorView::contiguous(dq.data(), DType::f32, {B, T, H, K});
  p.dk = TensorView::contiguous(dk.data(), DType::f32, {B, T, H, K});
  p.dv_out = TensorView::contiguous(dv_out.data(), DType::f32, {B, T, H, V});
  p.db = TensorView::contiguous(db.data(), DType::f32, {B, T, H});
  p.dg = TensorView::contiguous(dg.data(), DType::f32, {B, T, H, K});
  p.dA = TensorView::contiguous(dA.data(), DType::f32, {B, T, H, BT});
  p.chunk_size = BT;
  kda::Status s = kda::run(p, kda::Backend::cpu_ref);
  if (!s.ok()) {
    std::fprintf(stderr, "kda::run failed: %s\n", s.message.c_str());
    return 1;
  }
  for (const auto* out : {&dq, &dk, &dv_out, &db, &dg, &dA}) {
    for (float x : *out) {
      if (!std::isfinite(x)) {
        std::fprintf(stderr, "an output element was not written\n");
        return 1;
      }
    }
  }
  std::printf("kda %s: consumer example passed (dq[0] = %g)\n", kda::kVersionString, dq[0]);
  return 0;
}
