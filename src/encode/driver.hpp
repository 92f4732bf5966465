// The NVG encoder's driver (SPEC §3.2–3.9), written once over a backend's
// stage functions: the initial factors (latents → ITQ → SVID → ALS, then the
// residual path), the refinement (discrete knots alternating with ALS), the
// candidates at one bit budget, the selection on the held-out Gram, the pack.
// The CPU (float64 reference) and CUDA (float32) encoders run this same code;
// their folders hold only the stages and kernels.
//
// A backend's stages (encode/cpu/stages.hpp, encode/cuda/stages.hpp) are
// found by their argument types (the backend's TensorContext), with the same
// signatures on both sides:
//   residual(c, f, with_h) → {W − Ŵ_1, (W − Ŵ_1)·H or empty}  (stage 6)
//   als(f, c, sweeps)                                             (stage 5)
//   flip_u(f, c, p, tol, passes), gptq_v(f, c, p, tol, passes, block)  (7)
//   err(f, c, metric), rel_err(f, c, metric)                      (§2)
//   pack(c, f, out): payload, sizes and errors with the stored scales (9)
// and its Backend struct (encode/cpu/backend.hpp, encode/cuda/backend.hpp)
// names its types and adapts the stages whose arguments differ:
//   B::Context  the per-tensor context (W, its products, the input, profile)
//   B::Factors  the BLR factors (blr::Factors, cuda::DeviceFactors)
//   B::Mat      a dense matrix; B::Metric the error metrics (h, fit, sel)
//   B::Stage    a scope timed into the profile: B::Stage(c, "latents")
//   shape(c) → {m, n};  weight(c) → W;  weight_h(c) → W·H;  factors(c, r);
//   copy(f, c)
//   latents(c, t, t_h, r, whiten, of_weight) → {U_p, V_p}      (stage 2)
//   itq_weights(c, U_p, V_p), itq(c, U_p, V_p, w_u, w_v, iters)  (stage 3)
//   svid(c, u, v) → a path                                        (stage 4)
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "encode/options.hpp"

namespace cortiq::encode::driver {

// The ranks of the two candidates a budget allows (0: not tried). Throws when
// two paths are forced and the budget is below two rank-1 paths.
struct CandidateRanks {
    int64_t two_paths = 0, one_path = 0;
    bool both() const { return two_paths >= 1 && one_path >= 1; }
};
CandidateRanks candidate_ranks(int64_t m, int64_t n, const Options& o);

// One candidate's held-out errors (init_sel: P = 2 before the knots, -1
// otherwise; sweep_sel: after each refinement sweep, with CORTIQ_SWEEP_SEL).
struct CandidateScore {
    int paths = 0;
    double sel = 0;
    double init_sel = -1;
    std::vector<double> sweep_sel;
};
// Fills out's selection errors and returns the winner (the lower held-out
// error; the first on a tie) and the report line's "sel:" notes.
std::pair<size_t, std::string> select(const std::vector<CandidateScore>& scores, Encoded& out);

template <class B>
struct Candidate {
    CandidateScore score;
    typename B::Factors factors;
};

// Stages 2–4 for one path: the latents of a target, the ITQ gauge, SVID.
template <class B>
auto latent_path(const typename B::Context& c, const typename B::Mat& target,
                 const typename B::Mat* target_h, int64_t r, const Options& o, bool of_weight) {
    typename B::Mat up, vp;
    {
        typename B::Stage st(c, "latents");
        std::tie(up, vp) = B::latents(c, target, target_h, r, /*whiten=*/true, of_weight);
    }
    const auto it = [&] {
        typename B::Stage st(c, "itq");
        auto [wu, wv] = B::itq_weights(c, up, vp);
        return B::itq(c, up, vp, wu, wv, o.itq_iters);
    }();
    typename B::Stage st(c, "svid");
    return B::svid(c, it.u, it.v);
}

// Stages 2–6: path 1 from the latents of W, ALS; with two paths, path 2 from
// the latents of the H-residual W − Ŵ_1, ALS on both.
template <class B>
typename B::Factors build_init(const typename B::Context& c, int64_t r, int paths,
                               const Options& o) {
    typename B::Factors f = B::factors(c, r);
    f.paths.push_back(latent_path<B>(c, B::weight(c), &B::weight_h(c), r, o, true));
    als(f, c, o.als_init_sweeps);
    if (paths == 2) {
        // the residual's product with H is needed only when m ≤ n (stage 2)
        const bool with_h = f.m <= f.n;
        typename B::Mat res, res_h;
        {
            typename B::Stage st(c, "latents");
            std::tie(res, res_h) = residual(c, f, with_h);
        }
        f.paths.push_back(latent_path<B>(c, res, with_h ? &res_h : nullptr, r, o, false));
        als(f, c, o.als_joint_sweeps);
    }
    return f;
}

// Stage 7: per path, flip_u and gptq_v, each followed by ALS and kept only
// when err_H drops. sweep_sel (a diagnostic, or null): the held-out error
// after each sweep.
template <class B>
typename B::Factors refine(typename B::Factors f, const typename B::Context& c, const Options& o,
                           std::vector<double>* sweep_sel = nullptr) {
    double cur;
    {
        typename B::Stage st(c, "err");
        cur = err(f, c, B::Metric::h);
    }
    for (int sweep = 0; sweep < o.refine_sweeps; ++sweep) {
        for (size_t p = 0; p < f.paths.size(); ++p) {
            for (int kind = 0; kind < 2; ++kind) {
                typename B::Factors trial = B::copy(f, c);
                if (kind == 0)
                    flip_u(trial, c, p, o.flip_tol, o.flip_passes);
                else
                    gptq_v(trial, c, p, o.flip_tol, o.gptq_passes, o.gptq_block, true, o.gptq_multi,
                           gptq_group_for(o.gptq_group, f.r));
                als(trial, c, o.als_knot_sweeps);
                double e;
                {
                    typename B::Stage st(c, "err");
                    e = err(trial, c, B::Metric::h);
                }
                if (e < cur) {
                    f = std::move(trial);
                    cur = e;
                }
            }
        }
        if (sweep_sel) {
            typename B::Stage st(c, "select");
            sweep_sel->push_back(rel_err(f, c, B::Metric::sel));
        }
    }
    return f;
}

// One candidate: P paths at rank r, refined with --method nvg, scored on H_sel.
template <class B>
Candidate<B> encode_candidate(const typename B::Context& c, int64_t r, int paths,
                              const Options& o) {
    Candidate<B> cd;
    cd.score.paths = paths;
    cd.factors = build_init<B>(c, r, paths, o);
    // CORTIQ_INIT_SEL=1 (a diagnostic): the P = 1 candidate's held-out error
    // before the knots too, to study whether the ranking of the candidates
    // before the knots predicts the pick.
    // CORTIQ_SWEEP_SEL=1 (a diagnostic): both, and the held-out error after
    // each refinement sweep, to study whether a candidate could be dropped
    // before its last sweep.
    static const bool init_sel_all = std::getenv("CORTIQ_INIT_SEL") != nullptr;
    static const bool sweep_sel = std::getenv("CORTIQ_SWEEP_SEL") != nullptr;
    if (paths == 2 || init_sel_all || sweep_sel) {
        typename B::Stage st(c, "select");
        cd.score.init_sel = rel_err(cd.factors, c, B::Metric::sel);
    }
    if (o.method == Method::nvg)
        cd.factors =
            refine<B>(std::move(cd.factors), c, o, sweep_sel ? &cd.score.sweep_sel : nullptr);
    typename B::Stage st(c, "select");
    cd.score.sel = rel_err(cd.factors, c, B::Metric::sel);
    return cd;
}

// The candidates the budget allows, one after the other (P = 2 first).
template <class B>
std::vector<Candidate<B>> encode_candidates(const typename B::Context& c,
                                            const CandidateRanks& ranks, const Options& o) {
    std::vector<Candidate<B>> cands;
    if (ranks.two_paths >= 1) cands.push_back(encode_candidate<B>(c, ranks.two_paths, 2, o));
    if (ranks.one_path >= 1) cands.push_back(encode_candidate<B>(c, ranks.one_path, 1, o));
    return cands;
}

// Stages 8–9: the lower held-out error wins; pack; the report line.
template <class B>
Encoded select_and_pack(const typename B::Context& c, const std::vector<Candidate<B>>& cands,
                        const Options& o) {
    Encoded out;
    std::vector<CandidateScore> scores;
    for (const auto& cd : cands) scores.push_back(cd.score);
    const auto [best, notes] = select(scores, out);
    pack(c, cands[best].factors, out);
    out.line = fmt::format("pick P{} r{} | sel: {} | stored fit {:.4f} sel {:.4f}",
                           scores[best].paths, out.rank, notes, out.err_fit, out.err_sel);
    out.line += out.over_budget(o.bpw);
    return out;
}

// The svid baseline: dual SVID of the plain SVD of W (no whitening, ITQ, ALS
// or knots), one path.
template <class B>
Encoded encode_svid(const typename B::Context& c, const Options& o) {
    const auto [m, n] = B::shape(c);
    const int64_t r = one_path_rank(m, n, o.bpw);
    typename B::Factors f = B::factors(c, r);
    {
        typename B::Stage st(c, "latents");
        auto [up, vp] = B::latents(c, B::weight(c), nullptr, r, /*whiten=*/false, false);
        f.paths.push_back(B::svid(c, up, vp));
    }
    Encoded out;
    pack(c, f, out);
    out.line =
        fmt::format("svid P1 r{} | stored fit {:.4f} sel {:.4f}", r, out.err_fit, out.err_sel) +
        out.over_budget(o.bpw);
    return out;
}

}  // namespace cortiq::encode::driver
