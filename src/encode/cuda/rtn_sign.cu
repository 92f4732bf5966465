// The rtn-sign baseline on the device (cpu/rtn_sign.cpp): Ŵ = diag(h) sign(W)
// diag(g), h and g fitted in the H metric by alternating exact solves.
#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "blr/sign.hpp"
#include "core/half.hpp"
#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

Encoded encode_rtn_sign(const MatD& w, const InputContext& input_ctx, const Options& o,
                        Profile* prof, Gpu& gpu) {
    (void)o;
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t m = w.rows(), n = w.cols();
    const cudaStream_t st = gpu.stream();
    const TensorData td(gpu, w, input_ctx);
    double rel_fit = 0, rel_sel = 0;
    {
        StageTimer timer(gpu, prof, "rtn-sign");
        DMat s(m, n, st);
        sign_abs(st, td.w.data(), s.data(), nullptr, m * n);
        VecD h(m, 0.0), g(n, 1.0);
        for (int64_t i = 0; i < m; ++i) {
            double a = 0;
            for (int64_t j = 0; j < n; ++j) a += std::abs(w(i, j));
            h[i] = a / static_cast<double>(n);
        }
        DVec h_d = upload(h, st), g_d = upload(g, st);
        DMat sg(m, n, st), hs(m, n, st);
        DVec num(m, st), den(m, st), rhs(n, st);
        for (int sw = 0; sw < 6; ++sw) {
            // h_i = (s_i∘g)ᵀ H w_i / (s_i∘g)ᵀ H (s_i∘g)
            scale_rc(st, sg.data(), s.data(), nullptr, g_d.get(), m, n);
            const DMat sgh = mm(gpu, sg, false, input_ctx.h, false);
            rowdot(st, sgh.data(), td.w.data(), m, n, num.get());
            rowdot(st, sgh.data(), sg.data(), m, n, den.get());
            const VecD nu = download(num, st), de = download(den, st);
            for (int64_t i = 0; i < m; ++i)
                if (de[i] > 0) h[i] = nu[i] / de[i];
            h_d = upload(h, st);
            // g: ((Sᵀ diag(h²) S) ∘ H) g = diag(Sᵀ diag(h) W H)
            scale_rc(st, hs.data(), s.data(), h_d.get(), nullptr, m, n);
            coldot(st, hs.data(), td.wh.data(), m, n, rhs.get());
            auto build = [&](float* sys) {
                gemm(gpu, true, false, n, n, m, 1.f, hs.data(), n, hs.data(), n, 0.f, sys, n);
                hadamard_inplace(st, sys, input_ctx.h.data(), n);
            };
            solve_spd(gpu, n, build, rhs.get(), g_d.get(), 1e-10);
            g = download(g_d, st);
        }
        for (auto& v : h) v = round_half(v);
        for (auto& v : g) v = round_half(v);
        h_d = upload(h, st);
        g_d = upload(g, st);
        DMat e(m, n, st);
        residual_rc(st, td.w.data(), s.data(), h_d.get(), g_d.get(), e.data(), m, n);
        const DMat eh = mm(gpu, e, false, input_ctx.h, false);
        const DMat es = mm(gpu, e, false, input_ctx.h_sel, false);
        SumBatch sb(st);
        sb.dot(e.data(), eh.data(), m * n);
        sb.dot(e.data(), e.data(), m * n);
        sb.dot(e.data(), es.data(), m * n);
        const auto v = sb.read();
        const double err_fit = std::max(v[0] - input_ctx.c_fit * v[1], 0.0);
        rel_fit = std::sqrt(err_fit / std::max(td.a_fit, 1e-300));
        rel_sel = std::sqrt(std::max(v[2], 0.0) / std::max(td.a_sel, 1e-300));
    }
    Encoded out;
    out.paths = 0;
    out.rank = 0;
    out.bits = blr::sign_bits(m, n);  // stored: 8 × payload bytes
    out.bpw = static_cast<double>(out.bits) / static_cast<double>(m * n);
    out.err_fit = rel_fit;
    out.err_sel = rel_sel;
    out.line = fmt::format("rtn-sign | stored fit {:.4f} sel {:.4f}", out.err_fit, out.err_sel);
    out.seconds = seconds_since(t0);
    return out;
}

}  // namespace cortiq::encode::cuda
