#include "model/delta_ops.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "core/parallel.hpp"

namespace cortiq::model {

namespace {

float silu(float x) {
    return x / (1.0f + std::exp(-x));
}

// y += a · x (n values)
void axpy(float a, const float* x, int64_t n, float* y) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// y (dv) = Sᵀ x, S dk × dv row-major, x dk values.
void state_read(const float* S, const float* x, int64_t dk, int64_t dv, float* y) {
    std::fill_n(y, dv, 0.0f);
    for (int64_t a = 0; a < dk; ++a) axpy(x[a], S + a * dv, dv, y);
}

void check(const DeltaRule& r) {
    CORTIQ_ASSERT(r.k_heads > 0 && r.v_heads % r.k_heads == 0 && r.dk > 0 && r.dv > 0,
                  "delta rule: {} key heads, {} value heads", r.k_heads, r.v_heads);
}

}  // namespace

void causal_conv1d_silu(const float* x, int64_t T, int64_t C, const float* w, int64_t K,
                        float* state, float* y) {
    CORTIQ_ASSERT(K >= 1 && C > 0);
    const int64_t P = K - 1;  // past rows kept
    // the input row at position τ (τ < 0: the state's row P + τ)
    auto row = [&](int64_t tau) { return tau >= 0 ? x + tau * C : state + (P + tau) * C; };
    constexpr int64_t kBlock = 256;  // channels per task, contiguous in every row
    parallel_for(0, (C + kBlock - 1) / kBlock, [&](int64_t blk) {
        const int64_t c0 = blk * kBlock, nc = std::min(C, c0 + kBlock) - c0;
        std::vector<float> wt(static_cast<size_t>(K * nc)), acc(static_cast<size_t>(nc));
        for (int64_t c = 0; c < nc; ++c)
            for (int64_t k = 0; k < K; ++k) wt[k * nc + c] = w[(c0 + c) * K + k];
        for (int64_t t = 0; t < T; ++t) {
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int64_t k = 0; k < K; ++k) {
                const float* in = row(t - P + k) + c0;
                const float* wk = wt.data() + k * nc;
                for (int64_t c = 0; c < nc; ++c) acc[c] += wk[c] * in[c];
            }
            float* out = y + t * C + c0;
            for (int64_t c = 0; c < nc; ++c) out[c] = silu(acc[c]);
        }
        // the new state: the inputs at T − P .. T − 1; in ascending order, a
        // row taken from the old state (r + T) is read before it is overwritten
        for (int64_t r = 0; r < P; ++r) {
            const float* src = row(T - P + r) + c0;
            std::copy(src, src + nc, state + r * C + c0);
        }
    });
}

void delta_gates(const float* a, const float* b, int64_t T, int64_t heads, const float* a_log,
                 const float* dt_bias, float* g, float* beta) {
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < heads; ++h) {
            const int64_t i = t * heads + h;
            const float z = a[i] + dt_bias[h];
            const float softplus = z > 20.0f ? z : std::log1p(std::exp(z));
            g[i] = -std::exp(a_log[h]) * softplus;
            beta[i] = 1.0f / (1.0f + std::exp(-b[i]));
        }
}

void gated_delta_recurrent(const DeltaRule& r, float* state, int64_t ld_o, float* out) {
    check(r);
    const int64_t dk = r.dk, dv = r.dv, group = r.v_heads / r.k_heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
    parallel_for(0, r.v_heads, [&](int64_t h) {
        const int64_t kh = h / group;
        float* S = state + h * dk * dv;
        std::vector<float> delta(static_cast<size_t>(dv));
        for (int64_t t = 0; t < r.T; ++t) {
            const float* q = r.q + t * r.ld_qk + kh * dk;
            const float* k = r.k + t * r.ld_qk + kh * dk;
            const float* v = r.v + t * r.ld_v + h * dv;
            const float decay = std::exp(r.g[t * r.v_heads + h]), b = r.beta[t * r.v_heads + h];
            // δ = β (v − (e^g S)ᵀ k), then in one pass over S's rows:
            // S ← e^g S + k δᵀ and o = Sᵀ q / sqrt(dk)
            state_read(S, k, dk, dv, delta.data());
            for (int64_t j = 0; j < dv; ++j) delta[j] = b * (v[j] - decay * delta[j]);
            float* o = out + t * ld_o + h * dv;
            std::fill_n(o, dv, 0.0f);
            for (int64_t a = 0; a < dk; ++a) {
                float* Sa = S + a * dv;
                const float ka = k[a], qa = q[a] * scale;
                for (int64_t j = 0; j < dv; ++j) {
                    Sa[j] = decay * Sa[j] + ka * delta[j];
                    o[j] += qa * Sa[j];
                }
            }
        }
    });
}

namespace {

// Scratch of one value head's chunks (gated_delta_chunked).
struct ChunkScratch {
    std::vector<float> gam, kb, a, u, w, qs, qe, p, kd;
    ChunkScratch(int64_t c, int64_t dk, int64_t dv)
        : gam(static_cast<size_t>(c)),
          kb(static_cast<size_t>(c * dk)),
          a(static_cast<size_t>(c * c)),
          u(static_cast<size_t>(c * dv)),
          w(static_cast<size_t>(c * dk)),
          qs(static_cast<size_t>(c * dk)),
          qe(static_cast<size_t>(c * dk)),
          p(static_cast<size_t>(c * c)),
          kd(static_cast<size_t>(c * dk)) {}
};

// C (m × n, ldc) = alpha · op(A) op(B) + beta · C, row-major float32.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, A,
                static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
                static_cast<blasint>(ldc));
}

// One value head h, the n tokens from t0, on its state S (dk × dv): the WY
// form of gated_delta_chunked, its products as GEMMs.
void delta_chunk(const DeltaRule& r, int64_t h, int64_t t0, int64_t n, float* S, ChunkScratch& s,
                 int64_t ld_o, float* out) {
    const int64_t dk = r.dk, dv = r.dv, kh = h / (r.v_heads / r.k_heads), H = r.v_heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
    const float* K = r.k + t0 * r.ld_qk + kh * dk;  // n rows, stride ld_qk
    const float* Q = r.q + t0 * r.ld_qk + kh * dk;
    const float* V = r.v + t0 * r.ld_v + h * dv;
    float acc = 0;
    for (int64_t i = 0; i < n; ++i) s.gam[i] = acc += r.g[(t0 + i) * H + h];
    const float last = s.gam[n - 1];
    for (int64_t i = 0; i < n; ++i) {
        const float b = r.beta[(t0 + i) * H + h], eg = std::exp(s.gam[i]);
        const float *k = K + i * r.ld_qk, *q = Q + i * r.ld_qk, *v = V + i * r.ld_v;
        const float kd = std::exp(last - s.gam[i]);
        for (int64_t a = 0; a < dk; ++a) {
            s.kb[i * dk + a] = b * k[a];
            s.w[i * dk + a] = eg * b * k[a];
            s.qs[i * dk + a] = scale * q[a];
            s.qe[i * dk + a] = eg * scale * q[a];
            s.kd[i * dk + a] = kd * k[a];
        }
        for (int64_t j = 0; j < dv; ++j) s.u[i * dv + j] = b * v[j];
    }
    // (I + L), L_ij = (kb_i · k_j) e^{γ_i − γ_j} below the diagonal; solve
    // (I + L) U = β v and (I + L) W = e^γ kb
    gemm(false, true, n, n, dk, 1.0f, s.kb.data(), dk, K, r.ld_qk, 0.0f, s.a.data(), n);
    // P_ij = (q̂_i · k_j) e^{γ_i − γ_j} on and below the diagonal
    gemm(false, true, n, n, dk, 1.0f, s.qs.data(), dk, K, r.ld_qk, 0.0f, s.p.data(), n);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
            const float d = j <= i ? std::exp(s.gam[i] - s.gam[j]) : 0.0f;
            s.a[i * n + j] = j < i ? s.a[i * n + j] * d : (j == i ? 1.0f : 0.0f);
            s.p[i * n + j] *= d;
        }
    const auto nb = static_cast<blasint>(n);
    cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, nb,
                static_cast<blasint>(dv), 1.0f, s.a.data(), nb, s.u.data(),
                static_cast<blasint>(dv));
    cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, nb,
                static_cast<blasint>(dk), 1.0f, s.a.data(), nb, s.w.data(),
                static_cast<blasint>(dk));
    // V' = U − W S (in u); o = (e^γ q̂) S + P V'; S ← e^{γ_last} S + Σ_j e^{γ_last − γ_j} k_j V'_jᵀ
    gemm(false, false, n, dv, dk, -1.0f, s.w.data(), dk, S, dv, 1.0f, s.u.data(), dv);
    float* O = out + t0 * ld_o + h * dv;
    gemm(false, false, n, dv, dk, 1.0f, s.qe.data(), dk, S, dv, 0.0f, O, ld_o);
    gemm(false, false, n, dv, n, 1.0f, s.p.data(), n, s.u.data(), dv, 1.0f, O, ld_o);
    gemm(true, false, dk, dv, n, 1.0f, s.kd.data(), dk, s.u.data(), dv, std::exp(last), S, dv);
}

}  // namespace

void gated_delta_chunked(const DeltaRule& r, int64_t chunk, float* state, int64_t ld_o,
                         float* out) {
    check(r);
    CORTIQ_ASSERT(chunk > 0);
    parallel_for(0, r.v_heads, [&](int64_t h) {
        ChunkScratch s(chunk, r.dk, r.dv);
        float* S = state + h * r.dk * r.dv;
        for (int64_t t0 = 0; t0 < r.T; t0 += chunk)
            delta_chunk(r, h, t0, std::min(chunk, r.T - t0), S, s, ld_o, out);
    });
}

}  // namespace cortiq::model
