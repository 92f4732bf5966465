// GPU generation of the synthetic layers (see synthetic.hpp).
#include <algorithm>
#include <cmath>

#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"
#include "encode/cuda/synthetic.hpp"

namespace cortiq::encode::cuda {

namespace {

MatD symmetric_download(const DMat& a, cudaStream_t st) {
    MatD h = download(a, st);
    const int64_t n = h.rows();
    parallel_for(
        0, n,
        [&](int64_t i) {
            for (int64_t j = 0; j < i; ++j) {
                const double v = 0.5 * (h(i, j) + h(j, i));
                h(i, j) = v;
                h(j, i) = v;
            }
        },
        16);
    return h;
}

// (1/T) XᵀX for T activations x = sc ∘ (z + C y).
MatD gram(Gpu& gpu, int64_t n, int64_t tokens, const DVec& sc, const DMat& cf, uint64_t seed,
          uint64_t stream) {
    const cudaStream_t st = gpu.stream();
    const int64_t nf = cf.rows == 0 ? 0 : cf.cols;
    DMat x(tokens, n, st), y(tokens, nf, st);
    fill_normal(st, x.data(), x.size(), seed, stream, 1.f);
    fill_normal(st, y.data(), y.size(), seed, stream + 1, 1.f);
    mm_into(gpu, 1.f, y, false, cf, true, 1.f, x);
    scale_rc_inplace(st, x.data(), nullptr, sc.get(), tokens, n);
    DMat h(n, n, st);
    gemm(gpu, true, false, n, n, tokens, 1.f / static_cast<float>(tokens), x.data(), n, x.data(), n,
         0.f, h.data(), n);
    return symmetric_download(h, st);
}

}  // namespace

MatD synthetic_weight(Gpu& gpu, int64_t m, int64_t n, uint64_t seed) {
    const cudaStream_t st = gpu.stream();
    const int64_t q = std::min(m, n);
    DMat a(m, q, st), b(q, n, st), noise(m, n, st);
    fill_normal(st, a.data(), a.size(), seed, 11, 1.f);
    fill_normal(st, b.data(), b.size(), seed, 12, static_cast<float>(1.0 / std::sqrt(double(q))));
    fill_normal(st, noise.data(), noise.size(), seed, 13, 0.002f);
    VecD d(q);
    for (int64_t k = 0; k < q; ++k) d[k] = std::pow(1.0 + static_cast<double>(k), -0.6) * 0.05;
    const DVec d_d = upload(d, st);
    scale_rc_inplace(st, a.data(), nullptr, d_d.get(), m, q);
    mm_into(gpu, 1.f, a, false, b, false, 1.f, noise);  // W = A diag(d) B + noise
    return download(noise, st);
}

std::pair<MatD, MatD> synthetic_grams(Gpu& gpu, int64_t n, uint64_t seed, int64_t tokens_fit) {
    const cudaStream_t st = gpu.stream();
    Rng rng(seed);
    VecD sc(n);
    for (auto& v : sc) v = std::exp(0.8 * rng.normal());
    for (int64_t k = 0; k < std::min<int64_t>(3, n); ++k) sc[(k * 7919) % n] *= 20.0;
    const int64_t nf = std::min<int64_t>(16, n);
    MatD cf(n, nf);
    for (auto& v : cf.vec()) v = 0.7 * rng.normal();
    const DVec sc_d = upload(sc, st);
    const DMat cf_d = upload(cf, st);
    if (tokens_fit <= 0) tokens_fit = 2 * n;
    MatD h_fit = gram(gpu, n, tokens_fit, sc_d, cf_d, seed, 21);
    MatD h_sel = gram(gpu, n, std::max<int64_t>(256, tokens_fit / 4), sc_d, cf_d, seed, 31);
    return {std::move(h_fit), std::move(h_sel)};
}

SyntheticLayer synthetic_layer(Gpu& gpu, int64_t m, int64_t n, uint64_t seed, int64_t tokens_fit) {
    SyntheticLayer s;
    s.w = synthetic_weight(gpu, m, n, seed);
    std::tie(s.h_fit, s.h_sel) = synthetic_grams(gpu, n, seed, tokens_fit);
    return s;
}

}  // namespace cortiq::encode::cuda
