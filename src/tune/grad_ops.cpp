#include "tune/grad_ops.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace cortiq::tune {

namespace {

CBLAS_TRANSPOSE op(bool t) {
    return t ? CblasTrans : CblasNoTrans;
}

}  // namespace

template <>
void gemm<float>(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    if (m == 0 || n == 0) return;
    cblas_sgemm(CblasRowMajor, op(ta), op(tb), static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
                beta, c, static_cast<int>(ldc));
}

template <>
void gemm<double>(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                  int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
    if (m == 0 || n == 0) return;
    cblas_dgemm(CblasRowMajor, op(ta), op(tb), static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
                beta, c, static_cast<int>(ldc));
}

// ── RMSNorm ─────────────────────────────────────────────────────────────────────
template <class T>
void rmsnorm_forward(const T* x, int64_t rows, int64_t n, const T* w, T eps, T* y, T* rstd) {
#pragma omp parallel for
    for (int64_t i = 0; i < rows; ++i) {
        const T* xi = x + i * n;
        double ss = 0;
        for (int64_t j = 0; j < n; ++j) ss += static_cast<double>(xi[j]) * xi[j];
        const T r = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
        rstd[i] = r;
        for (int64_t j = 0; j < n; ++j) y[i * n + j] = w[j] * (xi[j] * r);
    }
}

template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const T* rstd, int64_t rows, int64_t n,
                      T* dx, T* dw) {
#pragma omp parallel for
    for (int64_t i = 0; i < rows; ++i) {
        const T* xi = x + i * n;
        const T* dyi = dy + i * n;
        const T r = rstd[i];
        double s = 0;  // Σ_j w_j dy_j x̂_j
        for (int64_t j = 0; j < n; ++j) s += static_cast<double>(w[j]) * dyi[j] * (xi[j] * r);
        const T mean = static_cast<T>(s / static_cast<double>(n));
        for (int64_t j = 0; j < n; ++j) dx[i * n + j] = r * (w[j] * dyi[j] - xi[j] * r * mean);
    }
    if (!dw) return;
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < n; ++j) dw[j] += dy[i * n + j] * (x[i * n + j] * rstd[i]);
}

// ── RoPE ────────────────────────────────────────────────────────────────────────
namespace {

// x' = R(±θ) x on the pairs (j, j + d/2) of every head: sign +1 forward, −1
// for the transpose.
template <class T>
void rotate(T* x, int64_t rows, int64_t ld, int64_t heads, int64_t d, int64_t rot, int64_t period,
            const T* cos, const T* sin, T sign) {
    const int64_t half = rot / 2;  // the head's first `rot` values turn, the rest pass
#pragma omp parallel for
    for (int64_t i = 0; i < rows; ++i) {
        const T* c = cos + (i % period) * half;
        const T* s = sin + (i % period) * half;
        for (int64_t h = 0; h < heads; ++h) {
            T* xh = x + i * ld + h * d;
            for (int64_t j = 0; j < half; ++j) {
                const T a = xh[j], b = xh[j + half], sj = sign * s[j];
                xh[j] = a * c[j] - b * sj;
                xh[j + half] = b * c[j] + a * sj;
            }
        }
    }
}

}  // namespace

template <class T>
void rope_forward(T* x, int64_t rows, int64_t ld, int64_t heads, int64_t d, int64_t rot,
                  int64_t period, const T* cos, const T* sin) {
    rotate(x, rows, ld, heads, d, rot, period, cos, sin, T(1));
}

template <class T>
void rope_backward(T* dx, int64_t rows, int64_t ld, int64_t heads, int64_t d, int64_t rot,
                   int64_t period, const T* cos, const T* sin) {
    rotate(dx, rows, ld, heads, d, rot, period, cos, sin, T(-1));
}

// ── attention ───────────────────────────────────────────────────────────────────
template <class T>
void attention_forward(const T* q, const T* k, const T* v, int64_t L, int64_t heads,
                       int64_t kv_heads, int64_t d, T* out, T* probs) {
    CORTIQ_ASSERT(heads % kv_heads == 0, "heads {} not a multiple of kv heads {}", heads, kv_heads);
    const int64_t group = heads / kv_heads, ldq = heads * d, ldk = kv_heads * d;
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
    for (int64_t h = 0; h < heads; ++h) {
        const int64_t g = h / group;
        T* p = probs + h * L * L;
        gemm<T>(false, true, L, L, d, scale, q + h * d, ldq, k + g * d, ldk, T(0), p, L);
#pragma omp parallel for
        for (int64_t i = 0; i < L; ++i) {
            T* pi = p + i * L;
            T mx = pi[0];
            for (int64_t j = 1; j <= i; ++j) mx = std::max(mx, pi[j]);
            double sum = 0;
            for (int64_t j = 0; j <= i; ++j) {
                pi[j] = std::exp(pi[j] - mx);
                sum += pi[j];
            }
            const T inv = static_cast<T>(1.0 / sum);
            for (int64_t j = 0; j <= i; ++j) pi[j] *= inv;
            for (int64_t j = i + 1; j < L; ++j) pi[j] = T(0);
        }
        gemm<T>(false, false, L, d, L, T(1), p, L, v + g * d, ldk, T(0), out + h * d, ldq);
    }
}

template <class T>
void attention_backward(const T* dout, const T* q, const T* k, const T* v, const T* probs,
                        int64_t L, int64_t heads, int64_t kv_heads, int64_t d, T* dq, T* dk,
                        T* dv) {
    const int64_t group = heads / kv_heads, ldq = heads * d, ldk = kv_heads * d;
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
    std::fill(dk, dk + L * ldk, T(0));
    std::fill(dv, dv + L * ldk, T(0));
    std::vector<T> ds(static_cast<size_t>(L * L));
    for (int64_t h = 0; h < heads; ++h) {
        const int64_t g = h / group;
        const T* p = probs + h * L * L;
        // dv_g += P_hᵀ dout_h
        gemm<T>(true, false, L, d, L, T(1), p, L, dout + h * d, ldq, T(1), dv + g * d, ldk);
        // dP = dout_h v_gᵀ, then dS in place
        gemm<T>(false, true, L, L, d, T(1), dout + h * d, ldq, v + g * d, ldk, T(0), ds.data(), L);
#pragma omp parallel for
        for (int64_t i = 0; i < L; ++i) {
            T* di = ds.data() + i * L;
            const T* pi = p + i * L;
            double dot = 0;
            for (int64_t j = 0; j <= i; ++j) dot += static_cast<double>(di[j]) * pi[j];
            for (int64_t j = 0; j <= i; ++j) di[j] = pi[j] * (di[j] - static_cast<T>(dot)) * scale;
            for (int64_t j = i + 1; j < L; ++j) di[j] = T(0);
        }
        gemm<T>(false, false, L, d, L, T(1), ds.data(), L, k + g * d, ldk, T(0), dq + h * d, ldq);
        gemm<T>(true, false, L, d, L, T(1), ds.data(), L, q + h * d, ldq, T(1), dk + g * d, ldk);
    }
}

// ── SwiGLU ──────────────────────────────────────────────────────────────────────
template <class T>
void swiglu_forward(const T* gate, const T* up, int64_t n, T* y) {
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) y[i] = gate[i] / (T(1) + std::exp(-gate[i])) * up[i];
}

template <class T>
void swiglu_backward(const T* dy, const T* gate, const T* up, int64_t n, T* dgate, T* dup) {
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {
        const T s = T(1) / (T(1) + std::exp(-gate[i]));
        dgate[i] = dy[i] * up[i] * s * (T(1) + gate[i] * (T(1) - s));
        dup[i] = dy[i] * gate[i] * s;
    }
}

// ── embedding ───────────────────────────────────────────────────────────────────
template <class T>
void embedding_forward(const T* table, int64_t dim, const int32_t* tokens, int64_t rows, T* out) {
    for (int64_t i = 0; i < rows; ++i)
        std::copy(table + tokens[i] * dim, table + (tokens[i] + 1) * dim, out + i * dim);
}

template <class T>
void embedding_backward(const T* dout, int64_t dim, const int32_t* tokens, int64_t rows,
                        T* dtable) {
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < dim; ++j) dtable[tokens[i] * dim + j] += dout[i * dim + j];
}

// ── dense linear ────────────────────────────────────────────────────────────────
template <class T>
void linear_forward(const T* x, int64_t rows, int64_t n, const T* w, int64_t m, const T* bias,
                    T* y) {
    gemm<T>(false, true, rows, m, n, T(1), x, n, w, n, T(0), y, m);
    if (!bias) return;
#pragma omp parallel for
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < m; ++j) y[i * m + j] += bias[j];
}

template <class T>
void linear_backward(const T* dy, const T* x, int64_t rows, int64_t n, const T* w, int64_t m, T* dx,
                     T* dw, T* db) {
    if (dx) gemm<T>(false, false, rows, n, m, T(1), dy, m, w, n, T(0), dx, n);
    if (dw) gemm<T>(true, false, m, n, rows, T(1), dy, m, x, n, T(1), dw, n);
    if (db)
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < m; ++j) db[j] += dy[i * m + j];
}

// ── BLR linear ──────────────────────────────────────────────────────────────────
namespace {

// out[i, j] = a[i, j] · s[j] over rows × cols (added to out when `add`)
template <class T>
void scale_cols(const T* a, const T* s, int64_t rows, int64_t cols, T* out, bool add = false) {
#pragma omp parallel for
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
            out[i * cols + j] = (add ? out[i * cols + j] : T(0)) + a[i * cols + j] * s[j];
}

// acc[j] += Σ_i a[i, j] · b[i, j]
template <class T>
void col_dots(const T* a, const T* b, int64_t rows, int64_t cols, T* acc) {
    std::vector<double> s(static_cast<size_t>(cols), 0.0);
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
            s[j] += static_cast<double>(a[i * cols + j]) * b[i * cols + j];
    for (int64_t j = 0; j < cols; ++j) acc[j] += static_cast<T>(s[j]);
}

}  // namespace

template <class T>
void blr_forward(const BlrWeightsT<T>& w, const T* x, int64_t rows, T* y, BlrCacheT<T>& cache) {
    const int64_t m = w.m, n = w.n, r = w.r;
    const size_t np = w.paths.size();
    cache.t.resize(np);
    cache.u.resize(np);
    std::vector<T> xg(static_cast<size_t>(rows * n)), tl(static_cast<size_t>(rows * r));
    for (size_t p = 0; p < np; ++p) {
        const auto& q = w.paths[p];
        auto& t = cache.t[p];
        auto& u = cache.u[p];
        t.resize(static_cast<size_t>(rows * r));
        u.resize(static_cast<size_t>(rows * m));
        scale_cols(x, q.g.data(), rows, n, xg.data());
        gemm<T>(false, false, rows, r, n, T(1), xg.data(), n, q.sv.data(), r, T(0), t.data(), r);
        scale_cols(t.data(), q.l.data(), rows, r, tl.data());
        gemm<T>(false, true, rows, m, r, T(1), tl.data(), r, q.su.data(), r, T(0), u.data(), m);
        scale_cols(u.data(), q.h.data(), rows, m, y, p > 0);  // Σ over the paths
    }
}

template <class T>
void blr_backward(const BlrWeightsT<T>& w, const T* x, int64_t rows, const BlrCacheT<T>& cache,
                  const T* dy, T* dx, BlrGradT<T>& grad) {
    const int64_t m = w.m, n = w.n, r = w.r;
    std::vector<T> du(static_cast<size_t>(rows * m)), tl(static_cast<size_t>(rows * r)),
        dtl(static_cast<size_t>(rows * r)), xg(static_cast<size_t>(rows * n)),
        dxg(static_cast<size_t>(rows * n));
    for (size_t p = 0; p < w.paths.size(); ++p) {
        const auto& q = w.paths[p];
        auto& gq = grad.paths[p];
        const auto& t = cache.t[p];
        // the signs' gradients only where the tuner keeps them (empty: fixed)
        const bool sign_grads = !gq.su.empty();
        col_dots(dy, cache.u[p].data(), rows, m, gq.h.data());
        scale_cols(dy, q.h.data(), rows, m, du.data());
        gemm<T>(false, false, rows, r, m, T(1), du.data(), m, q.su.data(), r, T(0), dtl.data(), r);
        if (sign_grads) {
            scale_cols(t.data(), q.l.data(), rows, r, tl.data());
            gemm<T>(true, false, m, r, rows, T(1), du.data(), m, tl.data(), r, T(1), gq.su.data(),
                    r);
        }
        col_dots(dtl.data(), t.data(), rows, r, gq.l.data());
        scale_cols(dtl.data(), q.l.data(), rows, r, dtl.data());  // dt
        gemm<T>(false, true, rows, n, r, T(1), dtl.data(), r, q.sv.data(), r, T(0), dxg.data(), n);
        if (sign_grads) {
            scale_cols(x, q.g.data(), rows, n, xg.data());
            gemm<T>(true, false, n, r, rows, T(1), xg.data(), n, dtl.data(), r, T(1), gq.sv.data(),
                    r);
        }
        col_dots(dxg.data(), x, rows, n, gq.g.data());
        if (!dx) continue;
        scale_cols(dxg.data(), q.g.data(), rows, n, dx, p > 0);
    }
}

template <class T>
BlrGradT<T> blr_zero_grad(const BlrWeightsT<T>& w, bool with_signs) {
    BlrGradT<T> g{w.m, w.n, w.r, {}};
    for (const auto& q : w.paths)
        g.paths.push_back({std::vector<T>(q.h.size()), std::vector<T>(q.l.size()),
                           std::vector<T>(q.g.size()), std::vector<T>(with_signs ? q.su.size() : 0),
                           std::vector<T>(with_signs ? q.sv.size() : 0)});
    return g;
}

// ── distillation loss ───────────────────────────────────────────────────────────
template <class T>
double kl_forward_backward(const T* logits, const T* teacher_logp, int64_t rows, int64_t vocab,
                           T scale, T* dlogits) {
    double total = 0;
#pragma omp parallel for reduction(+ : total)
    for (int64_t i = 0; i < rows; ++i) {
        const T* li = logits + i * vocab;
        const T* ti = teacher_logp + i * vocab;
        T mx = li[0];
        for (int64_t j = 1; j < vocab; ++j) mx = std::max(mx, li[j]);
        double sum = 0;
        for (int64_t j = 0; j < vocab; ++j) sum += std::exp(static_cast<double>(li[j] - mx));
        const double lse = mx + std::log(sum);
        double kl = 0;
        for (int64_t j = 0; j < vocab; ++j) {
            const double pt = std::exp(static_cast<double>(ti[j]));
            const double ls = li[j] - lse;
            kl += pt * (ti[j] - ls);
            dlogits[i * vocab + j] = static_cast<T>(scale * (std::exp(ls) - pt));
        }
        total += kl;
    }
    return total * scale;
}

// ── Qwen3.5's attention gate ────────────────────────────────────────────────────
template <class T>
void split_query_gate(const T* qg, int64_t rows, int64_t heads, int64_t d, T* q, T* gate) {
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t h = 0; h < heads; ++h) {
            const T* src = qg + (i * heads + h) * 2 * d;
            std::copy(src, src + d, q + (i * heads + h) * d);
            std::copy(src + d, src + 2 * d, gate + (i * heads + h) * d);
        }
}

template <class T>
void merge_query_gate(const T* q, const T* gate, int64_t rows, int64_t heads, int64_t d, T* qg) {
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t h = 0; h < heads; ++h) {
            T* dst = qg + (i * heads + h) * 2 * d;
            std::copy(q + (i * heads + h) * d, q + (i * heads + h + 1) * d, dst);
            std::copy(gate + (i * heads + h) * d, gate + (i * heads + h + 1) * d, dst + d);
        }
}

template <class T>
void sigmoid_gate_forward(const T* x, const T* gate, int64_t n, T* y) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (T(1) + std::exp(-gate[i]));
}

template <class T>
void sigmoid_gate_backward(const T* dy, const T* x, const T* gate, int64_t n, T* dx, T* dgate) {
    for (int64_t i = 0; i < n; ++i) {
        const T sg = T(1) / (T(1) + std::exp(-gate[i]));
        dx[i] = dy[i] * sg;
        dgate[i] = dy[i] * x[i] * sg * (T(1) - sg);
    }
}

// ── instantiations ──────────────────────────────────────────────────────────────
#define CORTIQ_TUNE_OPS(T)                                                                         \
    template void split_query_gate<T>(const T*, int64_t, int64_t, int64_t, T*, T*);                \
    template void merge_query_gate<T>(const T*, const T*, int64_t, int64_t, int64_t, T*);          \
    template void sigmoid_gate_forward<T>(const T*, const T*, int64_t, T*);                        \
    template void sigmoid_gate_backward<T>(const T*, const T*, const T*, int64_t, T*, T*);         \
    template void rmsnorm_forward<T>(const T*, int64_t, int64_t, const T*, T, T*, T*);             \
    template void rmsnorm_backward<T>(const T*, const T*, const T*, const T*, int64_t, int64_t,    \
                                      T*, T*);                                                     \
    template void rope_forward<T>(T*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,        \
                                  const T*, const T*);                                             \
    template void rope_backward<T>(T*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,       \
                                   const T*, const T*);                                            \
    template void attention_forward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t,    \
                                       int64_t, T*, T*);                                           \
    template void attention_backward<T>(const T*, const T*, const T*, const T*, const T*, int64_t, \
                                        int64_t, int64_t, int64_t, T*, T*, T*);                    \
    template void swiglu_forward<T>(const T*, const T*, int64_t, T*);                              \
    template void swiglu_backward<T>(const T*, const T*, const T*, int64_t, T*, T*);               \
    template void embedding_forward<T>(const T*, int64_t, const int32_t*, int64_t, T*);            \
    template void embedding_backward<T>(const T*, int64_t, const int32_t*, int64_t, T*);           \
    template void linear_forward<T>(const T*, int64_t, int64_t, const T*, int64_t, const T*, T*);  \
    template void linear_backward<T>(const T*, const T*, int64_t, int64_t, const T*, int64_t, T*,  \
                                     T*, T*);                                                      \
    template void blr_forward<T>(const BlrWeightsT<T>&, const T*, int64_t, T*, BlrCacheT<T>&);     \
    template void blr_backward<T>(const BlrWeightsT<T>&, const T*, int64_t, const BlrCacheT<T>&,   \
                                  const T*, T*, BlrGradT<T>&);                                     \
    template BlrGradT<T> blr_zero_grad<T>(const BlrWeightsT<T>&, bool);                            \
    template double kl_forward_backward<T>(const T*, const T*, int64_t, int64_t, T, T*);

CORTIQ_TUNE_OPS(float)
CORTIQ_TUNE_OPS(double)

}  // namespace cortiq::tune
