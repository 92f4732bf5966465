#include "model/delta_ops.hpp"

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

float dot(const float* a, const float* b, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
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
    constexpr int64_t kBlock = 64;
    parallel_for(0, (C + kBlock - 1) / kBlock, [&](int64_t blk) {
        std::vector<float> past(static_cast<size_t>(P));
        for (int64_t c = blk * kBlock; c < std::min(C, (blk + 1) * kBlock); ++c) {
            for (int64_t r = 0; r < P; ++r) past[static_cast<size_t>(r)] = state[r * C + c];
            // the input at position τ (τ < 0: the state's row P + τ)
            auto in = [&](int64_t tau) {
                return tau >= 0 ? x[tau * C + c] : past[static_cast<size_t>(P + tau)];
            };
            const float* wc = w + c * K;
            for (int64_t t = 0; t < T; ++t) {
                float acc = 0;
                for (int64_t k = 0; k < K; ++k) acc += wc[k] * in(t - P + k);
                y[t * C + c] = silu(acc);
            }
            for (int64_t r = 0; r < P; ++r) state[r * C + c] = in(T - P + r);
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
        std::vector<float> delta(static_cast<size_t>(dv)), qs(static_cast<size_t>(dk));
        for (int64_t t = 0; t < r.T; ++t) {
            const float* q = r.q + t * r.ld_qk + kh * dk;
            const float* k = r.k + t * r.ld_qk + kh * dk;
            const float* v = r.v + t * r.ld_v + h * dv;
            const float decay = std::exp(r.g[t * r.v_heads + h]), b = r.beta[t * r.v_heads + h];
            for (int64_t i = 0; i < dk * dv; ++i) S[i] *= decay;
            state_read(S, k, dk, dv, delta.data());  // Sᵀ k
            for (int64_t j = 0; j < dv; ++j) delta[j] = b * (v[j] - delta[j]);
            for (int64_t a = 0; a < dk; ++a) axpy(k[a], delta.data(), dv, S + a * dv);
            for (int64_t a = 0; a < dk; ++a) qs[a] = q[a] * scale;
            state_read(S, qs.data(), dk, dv, out + t * ld_o + h * dv);
        }
    });
}

namespace {

// One value head, one chunk of n tokens starting at t0 (gated_delta_chunked).
struct ChunkScratch {
    std::vector<float> gam, u, w, vn, qs;
    ChunkScratch(int64_t chunk, int64_t dk, int64_t dv)
        : gam(static_cast<size_t>(chunk)),
          u(static_cast<size_t>(chunk * dv)),
          w(static_cast<size_t>(chunk * dk)),
          vn(static_cast<size_t>(chunk * dv)),
          qs(static_cast<size_t>(dk)) {}
};

void delta_chunk(const DeltaRule& r, int64_t h, int64_t t0, int64_t n, float* S, ChunkScratch& s,
                 int64_t ld_o, float* out) {
    const int64_t dk = r.dk, dv = r.dv, kh = h / (r.v_heads / r.k_heads), H = r.v_heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
    auto kr = [&](int64_t i) { return r.k + (t0 + i) * r.ld_qk + kh * dk; };
    float acc = 0;
    for (int64_t i = 0; i < n; ++i) s.gam[i] = acc += r.g[(t0 + i) * H + h];
    // (I + L) U = β v, (I + L) W = e^γ β k, by forward substitution
    for (int64_t i = 0; i < n; ++i) {
        const float b = r.beta[(t0 + i) * H + h];
        const float* v = r.v + (t0 + i) * r.ld_v + h * dv;
        float *ui = s.u.data() + i * dv, *wi = s.w.data() + i * dk;
        for (int64_t j = 0; j < dv; ++j) ui[j] = b * v[j];
        const float eg = std::exp(s.gam[i]);
        for (int64_t a = 0; a < dk; ++a) wi[a] = eg * b * kr(i)[a];
        for (int64_t j = 0; j < i; ++j) {
            const float l = b * dot(kr(i), kr(j), dk) * std::exp(s.gam[i] - s.gam[j]);
            axpy(-l, s.u.data() + j * dv, dv, ui);
            axpy(-l, s.w.data() + j * dk, dk, wi);
        }
    }
    // V' = U − W S; the outputs; the state
    for (int64_t i = 0; i < n; ++i) {
        float* vi = s.vn.data() + i * dv;
        state_read(S, s.w.data() + i * dk, dk, dv, vi);
        for (int64_t j = 0; j < dv; ++j) vi[j] = s.u[i * dv + j] - vi[j];
    }
    for (int64_t i = 0; i < n; ++i) {
        const float* q = r.q + (t0 + i) * r.ld_qk + kh * dk;
        for (int64_t a = 0; a < dk; ++a) s.qs[a] = q[a] * scale;
        float* o = out + (t0 + i) * ld_o + h * dv;
        state_read(S, s.qs.data(), dk, dv, o);
        const float eg = std::exp(s.gam[i]);
        for (int64_t j = 0; j < dv; ++j) o[j] *= eg;
        for (int64_t j = 0; j <= i; ++j)
            axpy(dot(s.qs.data(), kr(j), dk) * std::exp(s.gam[i] - s.gam[j]), s.vn.data() + j * dv,
                 dv, o);
    }
    const float last = s.gam[n - 1], el = std::exp(last);
    for (int64_t i = 0; i < dk * dv; ++i) S[i] *= el;
    for (int64_t j = 0; j < n; ++j) {
        const float f = std::exp(last - s.gam[j]);
        const float* k = kr(j);
        for (int64_t a = 0; a < dk; ++a) axpy(f * k[a], s.vn.data() + j * dv, dv, S + a * dv);
    }
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
