// Stages 2–6 (the initial model) and stage 7's refinement loop on the device,
// line for line cpu/refine.cpp: discrete moves alternating with ALS, a move
// kept only when err_H drops.
#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

namespace {

Path latent_path(const TensorContext& c, const DMat& t, const DMat* th, int64_t r, const Options& o,
                 bool use_cache) {
    DMat up, vp;
    {
        StageTimer st(c, "latents");
        std::tie(up, vp) = latents(c, t, th, r, /*whiten=*/true, use_cache);
    }
    ItqResult it;
    {
        StageTimer st(c, "itq");
        auto [wu, wv] = itq_weights(c, up, vp);
        it = itq(c, up, vp, wu, wv, o.itq_iters);
    }
    StageTimer st(c, "svid");
    return svid(c.gpu, it.u, it.v);
}

}  // namespace

Model build_init(const TensorContext& c, int64_t r, int paths, const Options& o) {
    const cudaStream_t st = c.stream();
    Model md;
    md.m = c.d.m;
    md.n = c.d.n;
    md.r = r;
    md.paths.push_back(latent_path(c, c.d.w, &c.d.wh, r, o, /*use_cache=*/true));
    als(md, c, o.als_init_sweeps);
    if (paths == 2) {
        // The second path starts from the latents of the H-residual W − Ŵ_1
        // (its product with H is needed only when m ≤ n).
        DMat res, resh;
        const bool need_th = md.m <= md.n;
        {
            StageTimer t(c, "latents");
            const DMat hsl = md.hsl(st, 0);
            res = c.d.w.clone(st);
            mm_into(c.gpu, -1.f, hsl, false, md.gs(st, 0), true, 1.f, res, c.big(r));
            if (need_th) {
                resh = c.d.wh.clone(st);
                mm_into(c.gpu, -1.f, hsl, false, md.hg(c, 0), true, 1.f, resh, c.big(r));
            }
        }
        md.paths.push_back(latent_path(c, res, need_th ? &resh : nullptr, r, o, false));
        als(md, c, o.als_joint_sweeps);
    }
    return md;
}

Model refine(Model md, const TensorContext& c, const Options& o) {
    double cur;
    {
        StageTimer st(c, "err");
        cur = err(md, c, Metric::h);
    }
    for (int sweep = 0; sweep < o.refine_sweeps; ++sweep) {
        for (size_t p = 0; p < md.paths.size(); ++p) {
            for (int kind = 0; kind < 2; ++kind) {
                Model trial = md.clone(c.stream());
                if (kind == 0)
                    flip_u(trial, c, p, o.flip_tol, o.flip_passes);
                else
                    gptq_v(trial, c, p, o.flip_tol, o.gptq_passes, o.gptq_block);
                als(trial, c, o.als_knot_sweeps);
                double e;
                {
                    StageTimer st(c, "err");
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

}  // namespace cortiq::encode::cuda
