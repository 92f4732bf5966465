#include "tune/adam.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "tune/block_tune.hpp"

namespace cortiq::tune {

void Adam::add(std::vector<float>& p, const std::vector<float>& g, Kind k, double lr,
               double latent_init) {
    Slot s{&p, &g, k, lr, std::vector<float>(p.size()), std::vector<float>(p.size()), {}};
    if (k == Kind::latent) {
        s.z.resize(p.size());
        for (size_t i = 0; i < p.size(); ++i) s.z[i] = static_cast<float>(p[i] * latent_init);
    }
    slots_.push_back(std::move(s));
}

int64_t Adam::step(double lr_factor) {
    ++t_;
    const double c1 = 1 - std::pow(b1_, static_cast<double>(t_));
    const double c2 = 1 - std::pow(b2_, static_cast<double>(t_));
    const float fb1 = static_cast<float>(b1_), fb2 = static_cast<float>(b2_);
    int64_t flips = 0;
    for (auto& s : slots_) {
        auto& p = *s.p;
        const auto& g = *s.g;
        const float step = static_cast<float>(s.lr * lr_factor / c1),
                    isc2 = static_cast<float>(1 / c2);
#pragma omp parallel for reduction(+ : flips)
        for (size_t i = 0; i < p.size(); ++i) {
            // the gradient in the coordinate Adam moves: log|s| for a scale
            const float gi = s.kind == Kind::log_scale ? g[i] * p[i] : g[i];
            s.m[i] = fb1 * s.m[i] + (1 - fb1) * gi;
            s.v[i] = fb2 * s.v[i] + (1 - fb2) * gi * gi;
            const float u = step * s.m[i] / (std::sqrt(s.v[i] * isc2) + 1e-12f);
            if (s.kind == Kind::log_scale) {
                p[i] *= std::exp(-u);
            } else if (s.kind == Kind::latent) {
                s.z[i] -= u;
                const float sg = s.z[i] < 0 ? -1.0f : 1.0f;
                if (s.z[i] != 0 && sg != p[i]) {
                    p[i] = sg;
                    ++flips;
                }
            } else {
                p[i] -= u;
            }
        }
    }
    return flips;
}

void add_block(Adam& a, BlockParamsT<float>& p, BlockGradsT<float>& g, const BlockDims& d,
               const TuneOptions& o) {
    auto lins = p.linears();
    for (size_t i = 0; i < lins.size(); ++i) {
        if (!lins[i]->blr) continue;
        for (size_t k = 0; k < lins[i]->blr->paths.size(); ++k) {
            auto& q = lins[i]->blr->paths[k];
            auto& gq = g.blr[i]->paths[k];
            a.add(q.h, gq.h, Kind::log_scale, o.lr_scales);
            a.add(q.l, gq.l, Kind::log_scale, o.lr_scales);
            a.add(q.g, gq.g, Kind::log_scale, o.lr_scales);
            if (o.lr_signs > 0) {
                a.add(q.su, gq.su, Kind::latent, o.lr_signs, o.latent_init);
                a.add(q.sv, gq.sv, Kind::latent, o.lr_signs, o.latent_init);
            }
        }
    }
    if (o.lr_norms > 0) {
        a.add(p.in_norm, g.in_norm, Kind::plain, o.lr_norms);
        a.add(p.post_norm, g.post_norm, Kind::plain, o.lr_norms);
        if (d.qk_norm) {
            a.add(p.q_norm, g.q_norm, Kind::plain, o.lr_norms);
            a.add(p.k_norm, g.k_norm, Kind::plain, o.lr_norms);
        }
    }
}

std::vector<std::vector<float>*> grad_vectors(BlockGradsT<float>& g) {
    std::vector<std::vector<float>*> out;
    for (auto& b : g.blr)
        if (b)
            for (auto& q : b->paths)
                for (auto* v : {&q.h, &q.l, &q.g, &q.su, &q.sv}) out.push_back(v);
    for (auto* v : {&g.in_norm, &g.post_norm, &g.q_norm, &g.k_norm}) out.push_back(v);
    return out;
}

void clear(BlockGradsT<float>& g) {
    for (auto* v : grad_vectors(g)) std::fill(v->begin(), v->end(), 0.0f);
}

void add_grads(BlockGradsT<float>& g, BlockGradsT<float>& h) {
    const auto a = grad_vectors(g), b = grad_vectors(h);
    CORTIQ_ASSERT(a.size() == b.size(), "add_grads: gradients of different blocks");
    for (size_t i = 0; i < a.size(); ++i) {
        CORTIQ_ASSERT(a[i]->size() == b[i]->size(), "add_grads: gradients of different blocks");
        for (size_t k = 0; k < a[i]->size(); ++k) (*a[i])[k] += (*b[i])[k];
    }
}

}  // namespace cortiq::tune
