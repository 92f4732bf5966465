#include "tune/cuda/adam_slots.hpp"

#include <cmath>

#include "core/error.hpp"

namespace cortiq::tune::cuda {

void AdamSlots::add(DVec& p, const DVec& g, AdamKind k, double lr, cudaStream_t st,
                    double latent_init) {
    Slot s{&p, &g, k, lr, DVec(p.size(), st), DVec(p.size(), st), {}};
    CUDA_CHECK(cudaMemsetAsync(s.m.get(), 0, sizeof(float) * p.size(), st));
    CUDA_CHECK(cudaMemsetAsync(s.v.get(), 0, sizeof(float) * p.size(), st));
    if (k == AdamKind::latent) {  // z = p · latent_init, as on the CPU
        std::vector<float> h = cortiq::cuda::download_f(p.get(), p.size(), st);
        for (auto& x : h) x = static_cast<float>(x * latent_init);
        s.z = cortiq::cuda::upload_f(h, st);
    }
    slots_.push_back(std::move(s));
}

// The order of tune::add_block: per BLR linear and path h, ℓ, g (then S_U,
// S_V), then the norms.
void AdamSlots::add_block(DBlockParams& p, const DBlockGrads& g, const BlockDims& d,
                          const TuneOptions& o, cudaStream_t st) {
    auto lins = p.linears();
    for (size_t i = 0; i < lins.size(); ++i) {
        if (!lins[i]->blr) continue;
        for (size_t k = 0; k < lins[i]->blr->paths.size(); ++k) {
            auto& q = lins[i]->blr->paths[k];
            const auto& gq = g.blr[i]->paths[k];
            add(q.h, gq.h, AdamKind::log_scale, o.lr_scales, st);
            add(q.l, gq.l, AdamKind::log_scale, o.lr_scales, st);
            add(q.g, gq.g, AdamKind::log_scale, o.lr_scales, st);
            if (o.lr_signs > 0) {
                add(q.su, gq.su, AdamKind::latent, o.lr_signs, st, o.latent_init);
                add(q.sv, gq.sv, AdamKind::latent, o.lr_signs, st, o.latent_init);
            }
        }
    }
    if (o.lr_norms > 0) {
        add(p.in_norm, g.in_norm, AdamKind::plain, o.lr_norms, st);
        add(p.post_norm, g.post_norm, AdamKind::plain, o.lr_norms, st);
        if (d.qk_norm) {
            add(p.q_norm, g.q_norm, AdamKind::plain, o.lr_norms, st);
            add(p.k_norm, g.k_norm, AdamKind::plain, o.lr_norms, st);
        }
    }
}

void AdamSlots::step(const Gpu& g, double beta1, double beta2, double lr_factor) {
    ++t_;
    const double c1 = 1 - std::pow(beta1, static_cast<double>(t_));
    const double c2 = 1 - std::pow(beta2, static_cast<double>(t_));
    const float fb1 = static_cast<float>(beta1), fb2 = static_cast<float>(beta2);
    for (auto& s : slots_)
        adam_step(g, s.kind, s.p->get(), s.g->get(), s.m.get(), s.v.get(),
                  s.z.empty() ? nullptr : s.z.get(), s.p->size(),
                  static_cast<float>(s.lr * lr_factor / c1), static_cast<float>(1 / c2), fb1, fb2);
}

}  // namespace cortiq::tune::cuda
