// The rtn-sign baseline: Ŵ = diag(h) sign(W) diag(g), one bit per weight plus
// f16 scales, h and g fitted in the H metric by alternating exact solves.
#include <chrono>
#include <cmath>

#include "blr/sign.hpp"
#include "core/half.hpp"
#include "core/parallel.hpp"
#include "encode/cpu/stages.hpp"
#include "linalg/blas.hpp"

namespace cortiq::encode::cpu {

RtnSign rtn_sign(const MatD& w, const InputContext& input_ctx, int sweeps) {
    const int64_t m = w.rows(), n = w.cols();
    MatD s(m, n);
    for (int64_t k = 0; k < w.size(); ++k) s.data()[k] = w.data()[k] >= 0 ? 1.0 : -1.0;
    RtnSign out;
    out.h.assign(m, 0.0);
    out.g.assign(n, 1.0);
    for (int64_t i = 0; i < m; ++i) {
        double a = 0;
        for (int64_t j = 0; j < n; ++j) a += std::abs(w(i, j));
        out.h[i] = a / static_cast<double>(n);
    }
    const MatD wh = la::gemm(w, false, input_ctx.h, false);
    for (int sw = 0; sw < sweeps; ++sw) {
        // h_i = (s_i∘g)ᵀ H w_i / (s_i∘g)ᵀ H (s_i∘g)
        MatD sg = s;
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) sg(i, j) *= out.g[j];
        const MatD sgh = la::gemm(sg, false, input_ctx.h, false);
        parallel_for(0, m, [&](int64_t i) {
            const double den = la::dot(sgh.row(i), sg.row(i), n);
            if (den > 0) out.h[i] = la::dot(sgh.row(i), w.row(i), n) / den;
        });
        // g: ((Sᵀ diag(h²) S) ∘ H) g = diag(Sᵀ diag(h) W H)
        MatD hs = s;
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) hs(i, j) *= out.h[i];
        MatD sys = la::syrk(hs, true);
        for (int64_t k = 0; k < sys.size(); ++k) sys.data()[k] *= input_ctx.h.data()[k];
        VecD rhs(n, 0.0);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) rhs[j] += hs(i, j) * wh(i, j);
        out.g = la::solve_spd(sys, rhs, 1e-10);
    }
    for (auto& v : out.h) v = round_half(v);
    for (auto& v : out.g) v = round_half(v);
    out.w_hat = s;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) out.w_hat(i, j) *= out.h[i] * out.g[j];
    return out;
}

Encoded encode_rtn_sign(const MatD& w, const InputContext& input_ctx, const Options& o,
                        Profile* prof) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t m = w.rows(), n = w.cols();
    RtnSign rs;
    {
        ScopedStage st(prof, "rtn-sign");
        rs = rtn_sign(w, input_ctx);
    }
    Encoded out;
    out.paths = 0;
    out.rank = 0;
    out.bits = blr::sign_bits(m, n);  // stored: 8 × payload bytes
    out.bpw = static_cast<double>(out.bits) / static_cast<double>(m * n);
    auto rel = [&](const MatD& x) {
        return std::sqrt(err_dense(w, rs.w_hat, x) /
                         std::max(la::frob_dot(w, la::gemm(w, false, x, false)), 1e-300));
    };
    MatD s(m, n);
    for (int64_t k = 0; k < w.size(); ++k) s.data()[k] = w.data()[k] >= 0 ? 1.0 : -1.0;
    out.payload = blr::pack_sign(s, rs.h, rs.g);
    out.err_fit = rel(input_ctx.h_fit);
    out.err_sel = rel(input_ctx.h_sel);
    out.line = fmt::format("rtn-sign | stored fit {:.4f} sel {:.4f}", out.err_fit, out.err_sel);
    out.seconds = seconds_since(t0);
    return out;
}

}  // namespace cortiq::encode::cpu
