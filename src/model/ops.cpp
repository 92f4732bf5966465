#include "model/ops.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "core/parallel.hpp"
#include "linalg/panel_gemm.hpp"
#include "model/vec_exp.hpp"

namespace cortiq::model {

namespace {

// Runs body(i) for every row, in tasks of about kTaskElems values: cheap
// elementwise work stays on one thread when it is small.
constexpr int64_t kTaskElems = 16384;

template <class F>
void for_rows(int64_t rows, int64_t row_elems, F&& body) {
    const int64_t per_task = std::max<int64_t>(1, kTaskElems / std::max<int64_t>(1, row_elems));
    const int64_t tasks = (rows + per_task - 1) / per_task;
    parallel_for(0, tasks, [&](int64_t t) {
        const int64_t e = std::min(rows, (t + 1) * per_task);
        for (int64_t i = t * per_task; i < e; ++i) body(i);
    });
}

}  // namespace

void rmsnorm(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y) {
    CORTIQ_ASSERT(n > 0);
    for_rows(rows, n, [&](int64_t i) {
        const float* xi = x + i * n;
        float* yi = y + i * n;
        double ss = 0;
        for (int64_t j = 0; j < n; ++j) ss += static_cast<double>(xi[j]) * xi[j];
        const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
        for (int64_t j = 0; j < n; ++j) yi[j] = w[j] * (xi[j] * inv);
    });
}

void rmsnorm_gated(const float* x, const float* z, int64_t rows, int64_t n, const float* w,
                   float eps, float* y) {
    CORTIQ_ASSERT(n > 0);
    for_rows(rows, n, [&](int64_t i) {
        const float* xi = x + i * n;
        const float* zi = z + i * n;
        float* yi = y + i * n;
        double ss = 0;
        for (int64_t j = 0; j < n; ++j) ss += static_cast<double>(xi[j]) * xi[j];
        const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
        for (int64_t j = 0; j < n; ++j) {
            const float s = zi[j] / (1.0f + std::exp(-zi[j]));  // silu
            yi[j] = w[j] * (xi[j] * inv) * s;
        }
    });
}

void l2norm_heads(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t d, float eps) {
    for_rows(rows, heads * d, [&](int64_t i) {
        for (int64_t h = 0; h < heads; ++h) {
            float* p = x + i * ld + h * d;
            double ss = 0;
            for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(p[j]) * p[j];
            const float inv = static_cast<float>(1.0 / std::sqrt(ss + eps));
            for (int64_t j = 0; j < d; ++j) p[j] *= inv;
        }
    });
}

void split_query_gate(const float* qg, int64_t rows, int64_t heads, int64_t d, float* q,
                      float* gate) {
    for_rows(rows, 2 * heads * d, [&](int64_t i) {
        for (int64_t h = 0; h < heads; ++h) {
            const float* src = qg + (i * heads + h) * 2 * d;
            std::copy_n(src, d, q + (i * heads + h) * d);
            std::copy_n(src + d, d, gate + (i * heads + h) * d);
        }
    });
}

void sigmoid_gate(const float* x, const float* gate, int64_t n, float* y) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-gate[i]));
}

std::vector<float> rope_inv_freq(const io::ModelConfig& c) {
    const int64_t d = c.rotary_dim(), half = d / 2;
    std::vector<float> f(static_cast<size_t>(half));
    const auto& s = c.rope_scaling;
    for (int64_t i = 0; i < half; ++i) {
        // transformers: 1 / base^(arange(0, d, 2) / d), in float32.
        const float expo = static_cast<float>(2 * i) / static_cast<float>(d);
        double inv = 1.0 / std::pow(c.rope_theta, static_cast<double>(expo));
        if (s.type == "linear") {
            inv /= s.factor;
        } else if (s.type == "llama3") {
            // _compute_llama3_parameters: long wavelengths divided by factor,
            // short ones kept, a smooth blend in between.
            const double old_len = static_cast<double>(s.original_max_position);
            const double low_wavelen = old_len / s.low_freq_factor;
            const double high_wavelen = old_len / s.high_freq_factor;
            const double wavelen = 2 * std::numbers::pi / inv;
            if (wavelen > low_wavelen) {
                inv /= s.factor;
            } else if (wavelen >= high_wavelen) {
                const double smooth = (old_len / wavelen - s.low_freq_factor) /
                                      (s.high_freq_factor - s.low_freq_factor);
                inv = (1 - smooth) * inv / s.factor + smooth * inv;
            }
        } else {
            CORTIQ_ASSERT(s.type == "default", "rope type {}", s.type);
        }
        f[static_cast<size_t>(i)] = static_cast<float>(inv);
    }
    return f;
}

RopeTable rope_table(std::span<const float> inv_freq, int64_t pos0, int64_t rows) {
    RopeTable t;
    t.pos0 = pos0;
    t.rows = rows;
    t.half = static_cast<int64_t>(inv_freq.size());
    t.cos.resize(static_cast<size_t>(rows * t.half));
    t.sin.resize(t.cos.size());
    for (int64_t i = 0; i < rows; ++i) {
        const float pos = static_cast<float>(pos0 + i);
        for (int64_t j = 0; j < t.half; ++j) {
            const float a = pos * inv_freq[static_cast<size_t>(j)];  // float32 as in HF
            t.cos[i * t.half + j] = static_cast<float>(std::cos(static_cast<double>(a)));
            t.sin[i * t.half + j] = static_cast<float>(std::sin(static_cast<double>(a)));
        }
    }
    return t;
}

void rope(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t head_dim,
          const RopeTable& table) {
    const int64_t half = table.half;  // r/2, r the rotary size
    CORTIQ_ASSERT(half > 0 && 2 * half <= head_dim && table.rows >= rows, "{} {} {} {}", table.half,
                  head_dim, table.rows, rows);
    for_rows(rows, heads * head_dim, [&](int64_t i) {
        const float* cs = table.cos.data() + i * half;
        const float* sn = table.sin.data() + i * half;
        for (int64_t h = 0; h < heads; ++h) {
            float* p = x + i * ld + h * head_dim;
            for (int64_t j = 0; j < half; ++j) {
                const float x1 = p[j], x2 = p[j + half];
                p[j] = x1 * cs[j] - x2 * sn[j];
                p[j + half] = x2 * cs[j] + x1 * sn[j];
            }
        }
    });
}

void softmax(float* s, int64_t n) {
    if (n <= 0) return;
    const float sum = exp_shifted_inplace(s, n, max_of(s, n));
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; ++j) s[j] *= inv;
}

void attention(const float* q, int64_t T, int64_t ldq, const float* k, const float* v, int64_t ldkv,
               int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t pos0, int64_t window,
               float* out, int64_t ldo) {
    CORTIQ_ASSERT(heads % kv_heads == 0 && T >= 0 && pos0 >= 0);
    if (T == 0) return;
    const int64_t group = heads / kv_heads;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    // Tasks are (head, block of query rows); a block scores only the keys its
    // last row can see, which keeps the causal waste of the GEMM small.
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (T + kBlock - 1) / kBlock;
    // One token over a short context is microseconds of work: on the calling
    // thread (core/parallel.hpp's kSerialWork), the same sums.
    const int64_t min_per_thread =
        min_per_thread_for(heads * blocks, heads * T * (pos0 + T) * head_dim);
    parallel_for(
        0, heads * blocks,
        [&](int64_t task) {
            // Late blocks (more keys) first, for load balance.
            const int64_t h = task % heads, b = blocks - 1 - task / heads, g = h / group;
            const int64_t i0 = b * kBlock, nb = std::min(kBlock, T - i0);
            const int64_t kmax = pos0 + i0 + nb;  // exclusive
            const int64_t kmin = window > 0 ? std::max<int64_t>(0, pos0 + i0 - window + 1) : 0;
            const int64_t nk = kmax - kmin;
            thread_local std::vector<float> scores;  // grows once per thread
            if (scores.size() < static_cast<size_t>(nb * nk))
                scores.resize(static_cast<size_t>(nb * nk));
            // S = scale · Q_blk K_gᵀ
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nb),
                        static_cast<int>(nk), static_cast<int>(head_dim), scale,
                        q + i0 * ldq + h * head_dim, static_cast<int>(ldq),
                        k + kmin * ldkv + g * head_dim, static_cast<int>(ldkv), 0.0f, scores.data(),
                        static_cast<int>(nk));
            // Masked softmax per row over the visible keys [lo, hi].
            for (int64_t r = 0; r < nb; ++r) {
                float* s = scores.data() + r * nk;
                const int64_t p = pos0 + i0 + r;
                const int64_t lo = (window > 0 ? std::max<int64_t>(0, p - window + 1) : 0) - kmin;
                const int64_t hi = p - kmin;
                std::fill(s, s + lo, 0.0f);
                softmax(s + lo, hi - lo + 1);
                std::fill(s + hi + 1, s + nk, 0.0f);
            }
            // O_blk = P V_g
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(nb),
                        static_cast<int>(head_dim), static_cast<int>(nk), 1.0f, scores.data(),
                        static_cast<int>(nk), v + kmin * ldkv + g * head_dim,
                        static_cast<int>(ldkv), 0.0f, out + i0 * ldo + h * head_dim,
                        static_cast<int>(ldo));
        },
        min_per_thread);
}

// silu(z)·u with e = exp(−|z|): sigmoid(z) = 1/(1+e) for z ≥ 0, e/(1+e) below.
void swiglu(const float* gate, const float* up, int64_t n, float* y) {
    for_rows((n + kTaskElems - 1) / kTaskElems, kTaskElems, [&](int64_t c) {
        const int64_t b = c * kTaskElems, e = std::min(n, b + kTaskElems);
        silu_mul(gate + b, up + b, e - b, y + b);
    });
}

void add(const float* a, const float* b, int64_t n, float* y) {
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void matmul_wt(const float* x, int64_t rows, int64_t n, const MatF& w, float* y) {
    CORTIQ_ASSERT(w.cols() == n, "{} vs {}", w.cols(), n);
    // y = x · Wᵀ
    la::panel_sgemm(true, rows, w.rows(), n, x, n, w.data(), 0.0f, y, w.rows());
}

std::vector<double> logsumexp_rows(const MatF& logits) {
    std::vector<double> out(static_cast<size_t>(logits.rows()));
    const int64_t V = logits.cols();
    for_rows(logits.rows(), V, [&](int64_t i) {
        const float* l = logits.row(i);
        const float mx = max_of(l, V);
        out[static_cast<size_t>(i)] = mx + std::log(sum_exp_shifted(l, V, mx));
    });
    return out;
}

double next_token_nll(const MatF& logits, std::span<const int32_t> tokens) {
    const int64_t T = static_cast<int64_t>(tokens.size());
    CORTIQ_ASSERT(logits.rows() == T, "{} vs {}", logits.rows(), T);
    const auto lse = logsumexp_rows(logits);
    double s = 0;
    for (int64_t i = 0; i + 1 < T; ++i) s += lse[static_cast<size_t>(i)] - logits(i, tokens[i + 1]);
    return s;
}

}  // namespace cortiq::model
