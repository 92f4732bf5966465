#include "tune/delta_grad_ops.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace cortiq::tune {

namespace {

template <class T>
T sigmoid(T x) {
    return T(1) / (T(1) + std::exp(-x));
}

// silu(x) written as the runtime's (model/delta_ops.cpp), so the float
// forward rounds as it does
template <class T>
T silu(T x) {
    return x / (T(1) + std::exp(-x));
}

// silu'(x) = σ(x) (1 + x (1 − σ(x)))
template <class T>
T silu_grad(T x) {
    const T s = sigmoid(x);
    return s * (T(1) + x * (T(1) - s));
}

}  // namespace

// ── causal convolution + SiLU ───────────────────────────────────────────────────
template <class T>
void conv_silu_forward(const T* x, int64_t windows, int64_t L, int64_t C, const T* w, int64_t K,
                       T* pre, T* y) {
    CORTIQ_ASSERT(K >= 1 && C > 0 && L >= 0, "conv: K {}, C {}, L {}", K, C, L);
    const int64_t rows = windows * L;
#pragma omp parallel for
    for (int64_t i = 0; i < rows; ++i) {
        const int64_t t = i % L;
        for (int64_t c = 0; c < C; ++c) {
            // pre[t, c] = Σ_k w[c·K + k] x[t − K + 1 + k, c], the rows before
            // the window's first zero (skipped: the sum's order is the runtime's)
            T acc = T(0);
            for (int64_t k = std::max<int64_t>(0, K - 1 - t); k < K; ++k)
                acc += w[c * K + k] * x[(i - K + 1 + k) * C + c];
            pre[i * C + c] = acc;
            y[i * C + c] = silu(acc);
        }
    }
}

template <class T>
void conv_silu_backward(const T* dy, const T* x, const T* pre, int64_t windows, int64_t L,
                        int64_t C, const T* w, int64_t K, T* dx, T* dw) {
    const int64_t rows = windows * L;
    // dpre = dy ∘ silu'(pre)
    std::vector<T> dpre(static_cast<size_t>(rows * C));
#pragma omp parallel for
    for (int64_t i = 0; i < rows * C; ++i) dpre[i] = dy[i] * silu_grad(pre[i]);
        // dx[t, c] = Σ_k w[c·K + k] dpre[t + K − 1 − k, c], rows past the window's end absent
#pragma omp parallel for
    for (int64_t i = 0; i < rows; ++i) {
        const int64_t t = i % L;
        for (int64_t c = 0; c < C; ++c) {
            T acc = T(0);
            for (int64_t k = std::max<int64_t>(0, t + K - L); k < K; ++k)
                acc += w[c * K + k] * dpre[(i + K - 1 - k) * C + c];
            dx[i * C + c] = acc;
        }
    }
    if (!dw) return;
    // dw[c·K + k] += Σ_t dpre[t, c] x[t − K + 1 + k, c]: blocks of channels,
    // each a task of its own (no shared writes), contiguous within a row
    constexpr int64_t kBlock = 64;
#pragma omp parallel for
    for (int64_t blk = 0; blk < (C + kBlock - 1) / kBlock; ++blk) {
        const int64_t c0 = blk * kBlock, nc = std::min(C, c0 + kBlock) - c0;
        std::vector<T> acc(static_cast<size_t>(nc * K), T(0));
        for (int64_t win = 0; win < windows; ++win)
            for (int64_t t = 0; t < L; ++t) {
                const T* dp = dpre.data() + (win * L + t) * C + c0;
                for (int64_t k = std::max<int64_t>(0, K - 1 - t); k < K; ++k) {
                    const T* xr = x + (win * L + t - K + 1 + k) * C + c0;
                    for (int64_t c = 0; c < nc; ++c) acc[c * K + k] += dp[c] * xr[c];
                }
            }
        for (int64_t j = 0; j < nc * K; ++j) dw[c0 * K + j] += acc[j];
    }
}

// ── L2 normalisation per head ───────────────────────────────────────────────────
template <class T>
void l2norm_forward(const T* x, int64_t rows, int64_t ld, int64_t heads, int64_t d, T eps, T* y,
                    T* inv) {
#pragma omp parallel for
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t h = 0; h < heads; ++h) {
            const T* xi = x + i * ld + h * d;
            T* yi = y + i * ld + h * d;
            // the sum in double as model::l2norm_heads
            double ss = 0;
            for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(xi[j]) * xi[j];
            const T r = static_cast<T>(1.0 / std::sqrt(ss + eps));
            inv[i * heads + h] = r;
            for (int64_t j = 0; j < d; ++j) yi[j] = xi[j] * r;
        }
}

template <class T>
void l2norm_backward(const T* dy, const T* y, const T* inv, int64_t rows, int64_t ld, int64_t heads,
                     int64_t d, T* dx) {
#pragma omp parallel for
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t h = 0; h < heads; ++h) {
            const T* dyi = dy + i * ld + h * d;
            const T* yi = y + i * ld + h * d;
            T* dxi = dx + i * ld + h * d;
            // dx = inv (dy − y (y · dy)); the dot first, so dx may be dy
            T dot = T(0);
            for (int64_t j = 0; j < d; ++j) dot += yi[j] * dyi[j];
            const T r = inv[i * heads + h];
            for (int64_t j = 0; j < d; ++j) dxi[j] = r * (dyi[j] - yi[j] * dot);
        }
}

// ── decay and write gates ───────────────────────────────────────────────────────
namespace {

constexpr double kSoftplusThreshold = 20.0;  // torch's softplus: identity above it

}  // namespace

template <class T>
void delta_gates_forward(const T* a, const T* b, int64_t rows, int64_t heads, const T* a_log,
                         const T* dt_bias, T* g, T* beta) {
#pragma omp parallel for
    for (int64_t t = 0; t < rows; ++t)
        for (int64_t h = 0; h < heads; ++h) {
            const int64_t i = t * heads + h;
            const T z = a[i] + dt_bias[h];
            const T softplus = z > T(kSoftplusThreshold) ? z : std::log1p(std::exp(z));
            g[i] = -std::exp(a_log[h]) * softplus;
            beta[i] = T(1) / (T(1) + std::exp(-b[i]));
        }
}

template <class T>
void delta_gates_backward(const T* dg, const T* dbeta, const T* a, const T* beta, int64_t rows,
                          int64_t heads, const T* a_log, const T* dt_bias, T* da, T* db) {
#pragma omp parallel for
    for (int64_t t = 0; t < rows; ++t)
        for (int64_t h = 0; h < heads; ++h) {
            const int64_t i = t * heads + h;
            const T z = a[i] + dt_bias[h];
            // softplus' = σ, 1 where torch's softplus is the identity
            const T ds = z > T(kSoftplusThreshold) ? T(1) : sigmoid(z);
            da[i] = dg[i] * -std::exp(a_log[h]) * ds;
            db[i] = dbeta[i] * beta[i] * (T(1) - beta[i]);
        }
}

// ── gated delta rule ────────────────────────────────────────────────────────────
namespace {

template <class T>
void check(const DeltaRuleT<T>& r, int64_t chunk) {
    CORTIQ_ASSERT(r.k_heads > 0 && r.v_heads % r.k_heads == 0 && r.dk > 0 && r.dv > 0,
                  "delta rule: {} key heads, {} value heads", r.k_heads, r.v_heads);
    CORTIQ_ASSERT(chunk > 0 && r.L >= 0 && r.windows >= 0, "delta rule: chunk {}, L {}", chunk,
                  r.L);
}

// The inputs of value head h at row i (= window · L + t).
template <class T>
struct HeadView {
    const DeltaRuleT<T>& r;
    int64_t h, kh;
    HeadView(const DeltaRuleT<T>& rule, int64_t head)
        : r(rule), h(head), kh(head / (rule.v_heads / rule.k_heads)) {}
    const T* q(int64_t i) const { return r.q + i * r.ld_qk + kh * r.dk; }
    const T* k(int64_t i) const { return r.k + i * r.ld_qk + kh * r.dk; }
    const T* v(int64_t i) const { return r.v + i * r.ld_v + h * r.dv; }
    T g(int64_t i) const { return r.g[i * r.v_heads + h]; }
    T beta(int64_t i) const { return r.beta[i * r.v_heads + h]; }
};

// One step on S (dk × dv) in place, as model::gated_delta_recurrent:
//   δ = β (v − e^g Sᵀ k);  S ← e^g S + k δᵀ;  o = Sᵀ q̂ (when o is given)
// delta: dv values of scratch.
template <class T>
void delta_step(const HeadView<T>& hv, int64_t i, T scale, T* S, T* delta, T* o) {
    const int64_t dk = hv.r.dk, dv = hv.r.dv;
    const T *k = hv.k(i), *v = hv.v(i), *q = hv.q(i);
    const T decay = std::exp(hv.g(i)), b = hv.beta(i);
    std::fill_n(delta, dv, T(0));
    for (int64_t a = 0; a < dk; ++a)
        for (int64_t j = 0; j < dv; ++j) delta[j] += k[a] * S[a * dv + j];
    for (int64_t j = 0; j < dv; ++j) delta[j] = b * (v[j] - decay * delta[j]);
    if (o) std::fill_n(o, dv, T(0));
    for (int64_t a = 0; a < dk; ++a) {
        T* Sa = S + a * dv;
        const T ka = k[a], qa = q[a] * scale;
        for (int64_t j = 0; j < dv; ++j) {
            Sa[j] = decay * Sa[j] + ka * delta[j];
            if (o) o[j] += qa * Sa[j];
        }
    }
}

// The gradients of one row of one value head (outputs of delta_step_backward).
template <class T>
struct StepGrads {
    T* dq;  // dk values, added
    T* dk;  // dk values, added
    T* dv;  // dv values, overwritten
    T dg = 0, dbeta = 0;
};

// The header's backward of one step, S_prev the state before it and S_cur
// after it; dS (dk × dv) holds ∂/∂S_cur from the later steps on entry and
// ∂/∂S_prev on return. u, ddelta: dv values of scratch.
template <class T>
void delta_step_backward(const HeadView<T>& hv, int64_t i, T scale, const T* S_prev, const T* S_cur,
                         const T* dout, T* dS, T* u, T* ddelta, StepGrads<T>& gr) {
    const int64_t dk = hv.r.dk, dv = hv.r.dv;
    const T *k = hv.k(i), *v = hv.v(i), *q = hv.q(i);
    const T decay = std::exp(hv.g(i)), b = hv.beta(i);
    // o = S_curᵀ q̂:  dS += q̂ doᵀ,  dq = scale · S_cur do
    for (int64_t a = 0; a < dk; ++a) {
        const T qa = q[a] * scale;
        T acc = T(0);
        for (int64_t j = 0; j < dv; ++j) {
            dS[a * dv + j] += qa * dout[j];
            acc += S_cur[a * dv + j] * dout[j];
        }
        gr.dq[a] += scale * acc;
    }
    // u = v − Pᵀ k with P = e^g S_prev (δ = β u);  dδ = dSᵀ k
    std::copy_n(v, dv, u);
    std::fill_n(ddelta, dv, T(0));
    for (int64_t a = 0; a < dk; ++a)
        for (int64_t j = 0; j < dv; ++j) {
            u[j] -= decay * S_prev[a * dv + j] * k[a];
            ddelta[j] += dS[a * dv + j] * k[a];
        }
    // dv = β dδ;  dβ = dδ · u
    T db = T(0);
    for (int64_t j = 0; j < dv; ++j) {
        gr.dv[j] = b * ddelta[j];
        db += ddelta[j] * u[j];
    }
    gr.dbeta = db;
    // dk += dS δ − β P dδ;  dP = dS − β k dδᵀ;  dg = Σ dP ∘ P;  dS ← e^g dP
    T dg = T(0);
    for (int64_t a = 0; a < dk; ++a) {
        T acc = T(0);
        for (int64_t j = 0; j < dv; ++j) {
            const T P = decay * S_prev[a * dv + j];
            T& dSaj = dS[a * dv + j];
            acc += dSaj * (b * u[j]) - b * P * ddelta[j];
            const T dP = dSaj - b * k[a] * ddelta[j];
            dg += dP * P;
            dSaj = decay * dP;
        }
        gr.dk[a] += acc;
    }
    gr.dg = dg;
}

}  // namespace

template <class T>
void delta_rule_forward(const DeltaRuleT<T>& r, int64_t chunk, T* out, int64_t ld_o,
                        std::vector<T>& states) {
    check(r, chunk);
    const int64_t H = r.v_heads, dk = r.dk, dv = r.dv, sz = dk * dv;
    const int64_t nch = (r.L + chunk - 1) / chunk;
    states.assign(static_cast<size_t>(r.windows * nch * H * sz), T(0));
    const T scale = T(1) / std::sqrt(static_cast<T>(dk));
#pragma omp parallel for
    for (int64_t p = 0; p < r.windows * H; ++p) {
        const int64_t win = p / H, h = p % H;
        const HeadView<T> hv(r, h);
        std::vector<T> S(static_cast<size_t>(sz), T(0)), delta(static_cast<size_t>(dv));
        for (int64_t t = 0; t < r.L; ++t) {
            // the checkpoint: the state at the start of every chunk
            if (t % chunk == 0)
                std::copy(S.begin(), S.end(),
                          states.begin() + ((win * nch + t / chunk) * H + h) * sz);
            const int64_t i = win * r.L + t;
            delta_step(hv, i, scale, S.data(), delta.data(), out + i * ld_o + h * dv);
        }
    }
}

template <class T>
void delta_rule_backward(const DeltaRuleT<T>& r, int64_t chunk, const std::vector<T>& states,
                         const T* dout, int64_t ld_o, T* dq, T* dk, T* dv, T* dg, T* dbeta) {
    check(r, chunk);
    const int64_t H = r.v_heads, group = H / r.k_heads, dkk = r.dk, dvv = r.dv, sz = dkk * dvv;
    const int64_t nch = (r.L + chunk - 1) / chunk;
    CORTIQ_ASSERT(static_cast<int64_t>(states.size()) == r.windows * nch * H * sz,
                  "delta rule backward: {} checkpoint values for chunk {}", states.size(), chunk);
    const T scale = T(1) / std::sqrt(static_cast<T>(dkk));
    // One task per window and key head: its value heads run in turn, adding
    // into the key head's dq, dk columns, which no other task writes.
#pragma omp parallel for
    for (int64_t p = 0; p < r.windows * r.k_heads; ++p) {
        const int64_t win = p / r.k_heads, kh = p % r.k_heads;
        for (int64_t t = 0; t < r.L; ++t) {
            const int64_t i = win * r.L + t;
            std::fill_n(dq + i * r.ld_qk + kh * dkk, dkk, T(0));
            std::fill_n(dk + i * r.ld_qk + kh * dkk, dkk, T(0));
        }
        // the states S_{t0} .. S_{t0+n} of one chunk, recomputed from its checkpoint
        std::vector<T> Sc(static_cast<size_t>((chunk + 1) * sz)), dS(static_cast<size_t>(sz));
        std::vector<T> u(static_cast<size_t>(dvv)), ddelta(static_cast<size_t>(dvv));
        for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
            const HeadView<T> hv(r, h);
            std::fill(dS.begin(), dS.end(), T(0));
            for (int64_t c = nch - 1; c >= 0; --c) {
                const int64_t t0 = c * chunk, n = std::min(chunk, r.L - t0);
                const T* ckpt = states.data() + ((win * nch + c) * H + h) * sz;
                std::copy(ckpt, ckpt + sz, Sc.begin());
                for (int64_t s = 0; s < n; ++s) {
                    T* S = Sc.data() + (s + 1) * sz;
                    std::copy(S - sz, S, S);
                    delta_step(hv, win * r.L + t0 + s, scale, S, u.data(),
                               static_cast<T*>(nullptr));
                }
                for (int64_t s = n - 1; s >= 0; --s) {
                    const int64_t i = win * r.L + t0 + s;
                    StepGrads<T> gr{dq + i * r.ld_qk + kh * dkk, dk + i * r.ld_qk + kh * dkk,
                                    dv + i * r.ld_v + h * dvv};
                    delta_step_backward(hv, i, scale, Sc.data() + s * sz, Sc.data() + (s + 1) * sz,
                                        dout + i * ld_o + h * dvv, dS.data(), u.data(),
                                        ddelta.data(), gr);
                    dg[i * H + h] = gr.dg;
                    dbeta[i * H + h] = gr.dbeta;
                }
            }
        }
    }
}

// ── gated RMSNorm ───────────────────────────────────────────────────────────────
template <class T>
void rmsnorm_gated_forward(const T* x, const T* z, int64_t rows, int64_t n, const T* w, T eps, T* y,
                           T* rstd) {
    CORTIQ_ASSERT(n > 0);
#pragma omp parallel for
    for (int64_t i = 0; i < rows; ++i) {
        const T* xi = x + i * n;
        const T* zi = z + i * n;
        // as model::rmsnorm_gated: the sum in double, y = w (x · rstd) silu(z)
        double ss = 0;
        for (int64_t j = 0; j < n; ++j) ss += static_cast<double>(xi[j]) * xi[j];
        const T r = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
        rstd[i] = r;
        for (int64_t j = 0; j < n; ++j) y[i * n + j] = w[j] * (xi[j] * r) * silu(zi[j]);
    }
}

template <class T>
void rmsnorm_gated_backward(const T* dy, const T* x, const T* z, const T* w, const T* rstd,
                            int64_t rows, int64_t n, T* dx, T* dz, T* dw) {
#pragma omp parallel for
    for (int64_t i = 0; i < rows; ++i) {
        const T* xi = x + i * n;
        const T* zi = z + i * n;
        const T* dyi = dy + i * n;
        const T r = rstd[i];
        // with x̂ = x · rstd and e = dy ∘ w ∘ silu(z) (the gradient of x̂):
        //   dz = dy ∘ w ∘ x̂ ∘ silu'(z),  dx = rstd (e − x̂ mean(e ∘ x̂))
        double s = 0;
        for (int64_t j = 0; j < n; ++j) {
            const T xh = xi[j] * r;
            s += static_cast<double>(dyi[j] * w[j] * silu(zi[j])) * xh;
            dz[i * n + j] = dyi[j] * w[j] * xh * silu_grad(zi[j]);
        }
        const T mean = static_cast<T>(s / static_cast<double>(n));
        for (int64_t j = 0; j < n; ++j)
            dx[i * n + j] = r * (dyi[j] * w[j] * silu(zi[j]) - xi[j] * r * mean);
    }
    if (!dw) return;
    // dw += Σ_rows dy ∘ x̂ ∘ silu(z)
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < n; ++j)
            dw[j] += dy[i * n + j] * (x[i * n + j] * rstd[i]) * silu(z[i * n + j]);
}

// ── instantiations ──────────────────────────────────────────────────────────────
#define CORTIQ_TUNE_DELTA_OPS(T)                                                                   \
    template void conv_silu_forward<T>(const T*, int64_t, int64_t, int64_t, const T*, int64_t, T*, \
                                       T*);                                                        \
    template void conv_silu_backward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t,   \
                                        const T*, int64_t, T*, T*);                                \
    template void l2norm_forward<T>(const T*, int64_t, int64_t, int64_t, int64_t, T, T*, T*);      \
    template void l2norm_backward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t,      \
                                     int64_t, T*);                                                 \
    template void delta_gates_forward<T>(const T*, const T*, int64_t, int64_t, const T*, const T*, \
                                         T*, T*);                                                  \
    template void delta_gates_backward<T>(const T*, const T*, const T*, const T*, int64_t,         \
                                          int64_t, const T*, const T*, T*, T*);                    \
    template void delta_rule_forward<T>(const DeltaRuleT<T>&, int64_t, T*, int64_t,                \
                                        std::vector<T>&);                                          \
    template void delta_rule_backward<T>(const DeltaRuleT<T>&, int64_t, const std::vector<T>&,     \
                                         const T*, int64_t, T*, T*, T*, T*, T*);                   \
    template void rmsnorm_gated_forward<T>(const T*, const T*, int64_t, int64_t, const T*, T, T*,  \
                                           T*);                                                    \
    template void rmsnorm_gated_backward<T>(const T*, const T*, const T*, const T*, const T*,      \
                                            int64_t, int64_t, T*, T*, T*);

CORTIQ_TUNE_DELTA_OPS(float)
CORTIQ_TUNE_DELTA_OPS(double)

}  // namespace cortiq::tune
