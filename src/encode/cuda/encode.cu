// Stages 8–9 on the device (SPEC §3.8–3.9; cpu/encode.cpp): the P = 2 and
// P = 1 candidates at the same bit budget (on two streams at once when
// allowed), the lower held-out error wins; pack on the host; errors with the
// stored scales. Also `encode_gpu`, the one-tensor entry point of dispatch.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <thread>

#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"
#include "encode/dispatch.hpp"

namespace cortiq::encode::cuda {

namespace {

struct Candidate {
    int paths = 0;
    Model md;
    double sel = 0;
    double init_sel = -1;
};

Candidate run_candidate(const TensorContext& c, int64_t r, int paths, const Options& o,
                        bool knots) {
    Candidate cd;
    cd.paths = paths;
    cd.md = build_init(c, r, paths, o);
    if (paths == 2) {
        StageTimer st(c, "select");
        cd.init_sel = rel_err(cd.md, c, Metric::sel);
    }
    if (knots) cd.md = refine(std::move(cd.md), c, o);
    StageTimer st(c, "select");
    cd.sel = rel_err(cd.md, c, Metric::sel);
    return cd;
}

Encoded finish(const TensorContext& c, const Model& md, Encoded out) {
    blr::Model stored;
    {
        StageTimer st(c, "pack");
        out.payload = blr::pack(to_host(md, c.stream()), &stored);
    }
    StageTimer st(c, "select");
    // the stored (rebalanced, f16-rounded) scales with the same signs
    Model sd;
    sd.m = md.m;
    sd.n = md.n;
    sd.r = md.r;
    for (size_t p = 0; p < md.paths.size(); ++p) {
        Path q;
        q.h = upload(stored.paths[p].h, c.stream());
        q.l = upload(stored.paths[p].l, c.stream());
        q.g = upload(stored.paths[p].g, c.stream());
        q.su = md.paths[p].su.clone(c.stream());
        q.sv = md.paths[p].sv.clone(c.stream());
        sd.paths.push_back(std::move(q));
    }
    out.set_size(md.m, md.n, md.r, static_cast<int>(md.paths.size()));
    out.err_fit = rel_err(sd, c, Metric::fit);
    out.err_sel = rel_err(sd, c, Metric::sel);
    return out;
}

}  // namespace

Encoded encode_tensor(const MatD& w, const InputContext& ic, const Options& o, Profile* prof,
                      Gpu& gpu, const Tuning& tuning, Gpu* helper) {
    const auto t0 = std::chrono::steady_clock::now();
    gpu.make_current();
    CORTIQ_CHECK(ic.device == gpu.device(), "input context lives on GPU {}, the encoder on GPU {}",
                 ic.device, gpu.device());
    if (o.method == Method::rtn_sign) return encode_rtn_sign(w, ic, o, prof, gpu);
    const int64_t m = w.rows(), n = w.cols();
    if (tuning.check_memory) ensure_fits(m, n, o, /*with_context=*/false, tuning);
    std::optional<TensorData> td;
    {
        StageTimer st(gpu, prof, "tensor");
        td.emplace(gpu, w, ic, tuning);
    }
    TensorContext c(*td, ic, gpu, prof, tuning);
    Encoded out;
    if (o.method == Method::svid) {
        // Dual-SVID from the plain SVD of W (no whitening, ITQ, ALS or knots).
        const int64_t r1 = one_path_rank(m, n, o.bpw);
        Model md;
        md.m = m;
        md.n = n;
        md.r = r1;
        {
            StageTimer st(c, "latents");
            auto [up, vp] = latents(c, c.d.w, nullptr, r1, /*whiten=*/false);
            md.paths.push_back(svid(gpu, up, vp));
        }
        out = finish(c, md, std::move(out));
        out.line = fmt::format("svid P1 r{} | stored fit {:.4f} sel {:.4f}", r1, out.err_fit,
                               out.err_sel) +
                   out.over_budget(o.bpw);
        out.seconds = seconds_since(t0);
        return out;
    }
    const bool knots = o.method == Method::nvg;
    int64_t r2 = 0, r1 = 0;
    if (o.paths != PathsChoice::one) {
        r2 = blr::rank_for(m, n, o.bpw, 2);
        CORTIQ_CHECK(r2 >= 1 || o.paths != PathsChoice::two,
                     "{}x{} at {} bpw: the budget is below two rank-1 paths", m, n, o.bpw);
    }
    if (o.paths != PathsChoice::two) r1 = one_path_rank(m, n, o.bpw);
    // Both candidates start from W's latents: one eigendecomposition for both.
    EigCache eig;
    if (r1 >= 1 && r2 >= 1) {
        StageTimer st(c, "latents");
        eig = latents_cache(c, std::max(r1, r2));
        c.eig = &eig;
    }
    std::vector<Candidate> cands;
    if (r1 >= 1 && r2 >= 1 && tuning.parallel_candidates) {
        std::unique_ptr<Gpu> own;
        Gpu* hg = helper;
        if (!hg) {
            own = std::make_unique<Gpu>(gpu.device());
            hg = own.get();
        }
        gpu.sync();  // W, W·H and the eigenpairs are read by the helper's stream
        std::optional<Candidate> c1;
        std::exception_ptr err1;
        std::thread th([&] {
            try {
                hg->make_current();
                TensorContext cb(*td, ic, *hg, prof, tuning);
                cb.eig = &eig;
                c1 = run_candidate(cb, r1, 1, o, knots);
                hg->sync();
            } catch (...) {
                err1 = std::current_exception();
            }
        });
        std::optional<Candidate> c2;
        try {
            c2 = run_candidate(c, r2, 2, o, knots);
        } catch (...) {
            th.join();
            hg->sync_noexcept();
            throw;
        }
        th.join();
        if (err1) std::rethrow_exception(err1);
        c1->md.rebind(gpu.stream());  // the helper's stream is synchronised: hand over
        cands.push_back(std::move(*c2));
        cands.push_back(std::move(*c1));
    } else {
        if (r2 >= 1) cands.push_back(run_candidate(c, r2, 2, o, knots));
        if (r1 >= 1) cands.push_back(run_candidate(c, r1, 1, o, knots));
    }
    std::string notes;
    size_t best = 0;
    for (size_t i = 0; i < cands.size(); ++i) {
        const Candidate& cd = cands[i];
        if (cd.paths == 2) {
            out.err_init_sel = cd.init_sel;
            notes = fmt::format("init {:.4f}", cd.init_sel);
        }
    }
    for (size_t i = 0; i < cands.size(); ++i) {
        const Candidate& cd = cands[i];
        (cd.paths == 2 ? out.err_p2_sel : out.err_p1_sel) = cd.sel;
        notes += fmt::format("{}P{} {:.4f}", notes.empty() ? "" : " ", cd.paths, cd.sel);
        if (i == 0 || cd.sel < cands[best].sel) best = i;
    }
    const int p = cands[best].paths;
    out = finish(c, cands[best].md, std::move(out));
    out.line = fmt::format("pick P{} r{} | sel: {} | stored fit {:.4f} sel {:.4f}", p, out.rank,
                           notes, out.err_fit, out.err_sel);
    out.line += out.over_budget(o.bpw);
    cands.clear();
    gpu.sync();
    out.seconds = seconds_since(t0);
    return out;
}

}  // namespace cortiq::encode::cuda

namespace cortiq::encode {

Encoded encode_gpu(const MatD& w, const MatD& h_fit, const MatD& h_sel, const Options& o,
                   Profile* prof) {
    CORTIQ_CHECK(gpu_available(), "--device gpu: {}", gpu_unavailable_reason());
    cuda::Gpu gpu;
    cuda::ensure_fits(w.rows(), w.cols(), o, /*with_context=*/true);
    std::optional<cuda::InputContext> ic;
    {
        cuda::StageTimer st(gpu, prof, "context");
        ic.emplace(gpu, h_fit, h_sel, o.rho, "Gram");
    }
    cuda::Tuning t;
    t.check_memory = false;  // checked above, context included
    return cuda::encode_tensor(w, *ic, o, prof, gpu, t);
}

}  // namespace cortiq::encode
