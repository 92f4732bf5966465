// Stages 8–9 (SPEC §3.8–3.9): the P = 2 and P = 1 candidates at the same bit
// budget, the lower held-out error wins; pack; errors with the stored scales.
#include <algorithm>
#include <chrono>

#include "encode/cpu/stages.hpp"
#include "linalg/blas.hpp"

namespace cortiq::encode::cpu {

namespace {

Encoded finish(const TensorContext& c, const blr::Model& md, Encoded out) {
    blr::Model stored;
    {
        ScopedStage st(c.prof, "pack");
        out.payload = blr::pack(md, &stored);
    }
    ScopedStage st(c.prof, "select");
    out.set_size(md.m, md.n, md.r, static_cast<int>(md.paths.size()));
    out.err_fit = rel_err(stored, c, Metric::fit);
    out.err_sel = rel_err(stored, c, Metric::sel);
    return out;
}

}  // namespace

Encoded encode_tensor(const MatD& w, const InputContext& ic, const Options& o, Profile* prof) {
    const auto t0 = std::chrono::steady_clock::now();
    if (o.method == Method::rtn_sign) return encode_rtn_sign(w, ic, o, prof);
    const int64_t m = w.rows(), n = w.cols();
    TensorContext c(w, ic);
    c.prof = prof;
    Encoded out;
    if (o.method == Method::svid) {
        // Dual-SVID from the plain SVD of W (no whitening, ITQ, ALS or knots).
        const int64_t r1 = one_path_rank(m, n, o.bpw);
        blr::Model md;
        md.m = m;
        md.n = n;
        md.r = r1;
        {
            ScopedStage st(prof, "latents");
            auto [up, vp] = latents(w, nullptr, ic, r1, /*whiten=*/false);
            md.paths.push_back(svid(up, vp));
        }
        out = finish(c, md, std::move(out));
        out.line = fmt::format("svid P1 r{} | stored fit {:.4f} sel {:.4f}", r1, out.err_fit,
                               out.err_sel) +
                   out.over_budget(o.bpw);
        out.seconds = seconds_since(t0);
        return out;
    }
    const bool knots = o.method == Method::nvg;
    std::vector<std::pair<int, blr::Model>> cands;
    std::string notes;
    if (o.paths != PathsChoice::one) {
        const int64_t r2 = blr::rank_for(m, n, o.bpw, 2);
        if (r2 >= 1) {
            blr::Model md = build_init(c, r2, 2, o);
            {
                ScopedStage st(prof, "select");
                out.err_init_sel = rel_err(md, c, Metric::sel);
            }
            notes = fmt::format("init {:.4f}", out.err_init_sel);
            if (knots) md = refine(std::move(md), c, o);
            cands.emplace_back(2, std::move(md));
        } else {
            CORTIQ_CHECK(o.paths != PathsChoice::two,
                         "{}x{} at {} bpw: the budget is below two rank-1 paths", m, n, o.bpw);
        }
    }
    if (o.paths != PathsChoice::two) {
        blr::Model md = build_init(c, one_path_rank(m, n, o.bpw), 1, o);
        if (knots) md = refine(std::move(md), c, o);
        cands.emplace_back(1, std::move(md));
    }
    size_t best = 0;
    double best_e = 0;
    {
        ScopedStage st(prof, "select");
        for (size_t i = 0; i < cands.size(); ++i) {
            const double e = rel_err(cands[i].second, c, Metric::sel);
            (cands[i].first == 2 ? out.err_p2_sel : out.err_p1_sel) = e;
            notes += fmt::format("{}P{} {:.4f}", notes.empty() ? "" : " ", cands[i].first, e);
            if (i == 0 || e < best_e) {
                best = i;
                best_e = e;
            }
        }
    }
    const int p = cands[best].first;
    out = finish(c, cands[best].second, std::move(out));
    out.line = fmt::format("pick P{} r{} | sel: {} | stored fit {:.4f} sel {:.4f}", p, out.rank,
                           notes, out.err_fit, out.err_sel);
    out.line += out.over_budget(o.bpw);
    out.seconds = seconds_since(t0);
    return out;
}

}  // namespace cortiq::encode::cpu
