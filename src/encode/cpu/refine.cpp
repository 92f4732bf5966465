// Stages 2–6 (the initial model, SPEC §3.2–3.6) and stage 7's refinement loop:
// discrete moves alternating with ALS, a move kept only when err_H drops.
#include "encode/cpu/stages.hpp"
#include "linalg/blas.hpp"

namespace cortiq::encode::cpu {

namespace {

blr::Path latent_path(const TensorContext& c, const MatD& t, const MatD* th, int64_t r,
                      const Options& o) {
    MatD up, vp;
    {
        ScopedStage st(c.prof, "latents");
        std::tie(up, vp) = latents(t, th, c.ic, r);
    }
    ItqResult it;
    {
        ScopedStage st(c.prof, "itq");
        auto [wu, wv] = itq_weights(up, vp, c.ic);
        it = itq(up, vp, wu, wv, o.itq_iters);
    }
    ScopedStage st(c.prof, "svid");
    return svid(it.u, it.v);
}

}  // namespace

blr::Model build_init(const TensorContext& c, int64_t r, int paths, const Options& o) {
    blr::Model md;
    md.m = c.w.rows();
    md.n = c.w.cols();
    md.r = r;
    md.paths.push_back(latent_path(c, c.w, &c.wh, r, o));
    als(md, c, o.als_init_sweeps);
    if (paths == 2) {
        // The second path starts from the latents of the H-residual W − Ŵ_1.
        MatD res = c.w, resh = c.wh;
        {
            ScopedStage st(c.prof, "latents");
            const MatD hsl = md.hsl(0), gs = md.gs(0);
            la::gemm_into(-1.0, hsl, false, gs, true, 1.0, res);
            la::gemm_into(-1.0, hsl, false, la::gemm(c.ic.h, false, gs, false), true, 1.0, resh);
        }
        md.paths.push_back(latent_path(c, res, &resh, r, o));
        als(md, c, o.als_joint_sweeps);
    }
    return md;
}

blr::Model refine(blr::Model md, const TensorContext& c, const Options& o) {
    double cur;
    {
        ScopedStage st(c.prof, "err");
        cur = err(md, c, Metric::h);
    }
    for (int sweep = 0; sweep < o.refine_sweeps; ++sweep) {
        for (size_t p = 0; p < md.paths.size(); ++p) {
            for (int kind = 0; kind < 2; ++kind) {
                blr::Model trial = md;
                if (kind == 0)
                    flip_u(trial, c, p, o.flip_tol, o.flip_passes);
                else
                    gptq_v(trial, c, p, o.flip_tol, o.gptq_passes, o.gptq_block);
                als(trial, c, o.als_knot_sweeps);
                double e;
                {
                    ScopedStage st(c.prof, "err");
                    e = err(trial, c, Metric::h);
                }
                if (e < cur) {
                    md = std::move(trial);
                    cur = e;
                }
            }
        }
    }
    return md;
}

}  // namespace cortiq::encode::cpu
