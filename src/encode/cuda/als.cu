// Stage 5 on the device (SPEC §3.5): the exact block least squares of
// cpu/als.cpp. ℓ of all paths jointly (a Pr × Pr SPD system), h row by row (a
// P × P system per row, in a kernel), g per path (an n × n SPD system); SPD
// systems by Cholesky on the device with a 1e-10 relative ridge.
#include <cmath>
#include <optional>

#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

namespace {

constexpr double kRidge = 1e-10;  // relative ridge of every SPD solve (SPEC §3.5)
// g by PCG (Tuning::als_g_pcg): the relative residual that ends it, and the
// steps after which the system is factored instead.
constexpr double kPcgTol = 1e-6;
constexpr int kPcgMaxSteps = 8;

// Per row i, the P × P normal equations G h = rh (cpu/als.cpp's als_h).
__global__ void k_hsolve(int np, int64_t m, const float* rh0, const float* rh1, const float* g00,
                         const float* g01, const float* g11, float* h0, float* h1, double ridge) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= m) return;
    if (np == 1) {
        const double d = static_cast<double>(g00[i]) * (1 + ridge);
        if (d > 0) h0[i] = static_cast<float>(rh0[i] / d);
        return;
    }
    const double a = static_cast<double>(g00[i]) * (1 + ridge);
    const double dd = static_cast<double>(g11[i]) * (1 + ridge);
    const double bo = g01[i];
    const double det = a * dd - bo * bo;
    if (det > 1e-14 * a * dd && a > 0 && dd > 0) {
        const double r0 = rh0[i], r1 = rh1[i];
        h0[i] = static_cast<float>((dd * r0 - bo * r1) / det);
        h1[i] = static_cast<float>((a * r1 - bo * r0) / det);
    } else if (a > 0) {  // the second direction is degenerate: fit the first alone
        h0[i] = static_cast<float>((rh0[i] - bo * h1[i]) / a);
    }
}

// K_pq = B_pᵀ H B_q = right_pᵀ (H right_q), r × r, for p ≤ q.
struct KBlocks {
    std::vector<DMat> k;  // index p * np + q
    size_t np = 0;
    const DMat& at(size_t p, size_t q) const { return k[p * np + q]; }
};

KBlocks k_blocks(const DeviceFactors& factors, const TensorContext& c) {
    StageTimer timer(c.gpu, c.prof, "als/k_blocks", true);
    KBlocks kb;
    kb.np = factors.paths.size();
    kb.k.resize(kb.np * kb.np);
    for (size_t p = 0; p < kb.np; ++p) {
        const DMat right = factors.right(c.stream(), p);
        for (size_t q = p; q < kb.np; ++q)
            kb.k[p * kb.np + q] =
                mm(c.gpu, right, true, factors.h_right(c, q), false, c.big(factors.n));
    }
    return kb;
}

void solve_l(DeviceFactors& factors, const TensorContext& c, const KBlocks& kb) {
    StageTimer timer(c.gpu, c.prof, "als/l", true);
    const cudaStream_t st = c.stream();
    const size_t np = factors.paths.size();
    const int64_t r = factors.r, m = factors.m, pr = static_cast<int64_t>(np) * r;
    std::vector<DMat> a(np);
    for (size_t p = 0; p < np; ++p) a[p] = factors.left_h(st, p);
    // rhs[(p,k)] = Σ_i A_p(i,k) (W H B_p)(i,k)
    DVec rhs(pr, st);
    for (size_t p = 0; p < np; ++p)
        coldot(st, a[p].data(), factors.wh_right(c, p).data(), m, r, rhs.get() + p * r);
    // S[(p,k),(q,k')] = (A_pᵀ A_q)(k,k') · (B_pᵀ H B_q)(k,k'); the solver reads the
    // column-major lower triangle = row-major upper: blocks p ≤ q (and both
    // triangles of the diagonal blocks).
    std::vector<DMat> aa(np * np);
    for (size_t p = 0; p < np; ++p)
        for (size_t q = p; q < np; ++q)
            aa[p * np + q] = mm(c.gpu, a[p], true, a[q], false, c.big(m));
    auto build = [&](float* sys) {
        for (size_t p = 0; p < np; ++p)
            for (size_t q = p; q < np; ++q)
                hadamard_block(st,
                               sys + static_cast<int64_t>(p) * r * pr + static_cast<int64_t>(q) * r,
                               pr, aa[p * np + q].data(), kb.at(p, q).data(), r);
    };
    DVec x(pr, st);
    solve_spd(c.gpu, pr, build, rhs.get(), x.get(), kRidge);
    for (size_t p = 0; p < np; ++p)
        CUDA_CHECK(cudaMemcpyAsync(factors.paths[p].l.get(), x.get() + p * r, r * sizeof(float),
                                   cudaMemcpyDeviceToDevice, st));
}

void solve_h(DeviceFactors& factors, const TensorContext& c, const KBlocks& kb) {
    StageTimer timer(c.gpu, c.prof, "als/h", true);
    const cudaStream_t st = c.stream();
    const size_t np = factors.paths.size();
    const int64_t m = factors.m, r = factors.r;
    std::vector<DMat> sl(np);
    for (size_t p = 0; p < np; ++p) sl[p] = factors.left_l(st, p);
    DVec rh[2], gm[3];  // rh_p; g00, g01, g11
    for (size_t p = 0; p < np; ++p) {
        rh[p] = DVec(m, st);
        rowdot(st, factors.wh_right(c, p).data(), sl[p].data(), m, r, rh[p].get());
    }
    for (size_t p = 0; p < np; ++p)
        for (size_t q = p; q < np; ++q) {
            const DMat slk = mm(c.gpu, sl[p], false, kb.at(p, q), false, c.big(r));
            DVec& out = gm[p + q];
            out = DVec(m, st);
            rowdot(st, slk.data(), sl[q].data(), m, r, out.get());
        }
    float* h1 = np == 2 ? factors.paths[1].h.get() : nullptr;
    k_hsolve<<<static_cast<unsigned>((m + 255) / 256), 256, 0, st>>>(
        static_cast<int>(np), m, rh[0].get(), np == 2 ? rh[1].get() : nullptr, gm[0].get(),
        np == 2 ? gm[1].get() : nullptr, np == 2 ? gm[2].get() : nullptr, factors.paths[0].h.get(),
        h1, kRidge);
    CUDA_LAUNCH_CHECK();
}

}  // namespace

void als_l(DeviceFactors& factors, const TensorContext& c) {
    solve_l(factors, c, k_blocks(factors, c));
}

void als_h(DeviceFactors& factors, const TensorContext& c) {
    solve_h(factors, c, k_blocks(factors, c));
}

namespace {

// Preconditioned conjugate gradients on A x = b from x (in place), with the
// Cholesky factor of an earlier system of the same call as preconditioner.
// True when ‖b − A x‖ ≤ tol ‖b‖ within max_iter steps (the recursive residual).
bool pcg_with_factor(const Gpu& g, const float* a, const float* factor, int64_t n, const float* b,
                     float* x, double tol, int max_iter, int* steps) {
    const cudaStream_t st = g.stream();
    DVec res(n, st), z(n, st), dir(n, st), q(n, st);
    symv_solver(g, a, n, x, q.get());  // A x (the solver's triangle only)
    CUDA_CHECK(cudaMemcpyAsync(res.get(), b, n * sizeof(float), cudaMemcpyDeviceToDevice, st));
    axpby(st, res.get(), 1.f, q.get(), -1.f, n);  // r = b − A x
    const double bn = std::sqrt(dot(st, b, b, n));
    if (!(bn > 0)) return false;
    auto precondition = [&] {  // z = (L Lᵀ)⁻¹ r
        CUDA_CHECK(
            cudaMemcpyAsync(z.get(), res.get(), n * sizeof(float), cudaMemcpyDeviceToDevice, st));
        potrs_solver(g, factor, n, z.get());
    };
    precondition();
    CUDA_CHECK(
        cudaMemcpyAsync(dir.get(), z.get(), n * sizeof(float), cudaMemcpyDeviceToDevice, st));
    double rz = dot(st, res.get(), z.get(), n);
    for (int k = 0; k < max_iter; ++k) {
        *steps = k + 1;
        symv_solver(g, a, n, dir.get(), q.get());
        const double pq = dot(st, dir.get(), q.get(), n);
        if (!(pq > 0) || !std::isfinite(rz)) return false;
        const double alpha = rz / pq;
        axpby(st, x, 1.f, dir.get(), static_cast<float>(alpha), n);
        axpby(st, res.get(), 1.f, q.get(), static_cast<float>(-alpha), n);
        if (std::sqrt(dot(st, res.get(), res.get(), n)) <= tol * bn) return true;
        precondition();
        const double rz_next = dot(st, res.get(), z.get(), n);
        axpby(st, dir.get(), static_cast<float>(rz_next / rz), z.get(), 1.f, n);
        rz = rz_next;
    }
    return false;
}

}  // namespace

// g of path p: the n × n system (S_V K S_Vᵀ) ∘ H with K = MᵀM (M = left_p) and
// rhs_j = s_jᵀ [(W − Σ_{q≠p} Ŵ_q) H]ᵀ M. With a cache (Tuning::als_g_pcg),
// the first solve of a call factors its system and keeps the factor; the later
// sweeps of the call (same S_V, K moved by the other blocks) solve theirs by
// PCG from the current g with that factor, and factor anew when PCG stalls.
void als_g(DeviceFactors& factors, const TensorContext& c, size_t p, GCache* cache) {
    const cudaStream_t st = c.stream();
    const int64_t n = factors.n, r = factors.r;
    std::optional<StageTimer> timer(std::in_place, c.gpu, c.prof, "als/g_rhs", true);
    const DMat mm_p = factors.left(st, p);
    DMat y = mm(c.gpu, c.d.wh, true, mm_p, false, c.big(factors.m));  // H Wᵀ M
    for (size_t q = 0; q < factors.paths.size(); ++q) {
        if (q == p) continue;
        const DMat t = mm(c.gpu, factors.left(st, q), true, mm_p, false, c.big(factors.m));
        mm_into(c.gpu, -1.f, factors.h_right(c, q), false, t, false, 1.f, y, c.big(r));
    }
    const DMat& sv = factors.paths[p].sv;
    DVec rhs(n, st);
    rowdot(st, sv.data(), y.data(), n, r, rhs.get());
    y = DMat();
    const DMat k = mm(c.gpu, mm_p, true, mm_p, false, c.big(factors.m));
    const DMat svk = mm(c.gpu, sv, false, k, false, c.big(r), kExactA);
    auto build = [&](float* sys) {
        StageTimer build_timer(c.gpu, c.prof, "als/g_system", true);
        // S_V K S_Vᵀ: only the solver's triangle is read (Cholesky, PCG's symv)
        if (c.tuning.als_g_syrk && c.big(r) == Prec::fp32)
            syrkx_solver(c.gpu, n, r, svk.data(), sv.data(), sys);
        else
            gemm(c.gpu, false, true, n, n, r, 1.f, svk.data(), r, sv.data(), r, 0.f, sys, n,
                 c.big(r), kExactB);
        hadamard_inplace(st, sys, c.input_ctx.h.data(), n);
    };
    timer.reset();
    DVec g(n, st);
    // als/g_solve includes als/g_system (the build of the n × n system)
    StageTimer solve_timer(c.gpu, c.prof, "als/g_solve", true);
    if (cache && !cache->factor.empty() && !factors.paths[p].g.empty()) {
        DeviceBuffer<float> sys(n * n, st);
        build(sys.get());
        add_diag(st, sys.get(), n,
                 static_cast<float>(cache->ridge * mean_abs_diag(st, sys.get(), n)));
        CUDA_CHECK(cudaMemcpyAsync(g.get(), factors.paths[p].g.get(), n * sizeof(float),
                                   cudaMemcpyDeviceToDevice, st));
        int steps = 0;
        const bool ok = pcg_with_factor(c.gpu, sys.get(), cache->factor.get(), n, rhs.get(),
                                        g.get(), kPcgTol, kPcgMaxSteps, &steps);
        if (c.prof) c.prof->add("als.g_pcg_steps", 0, steps);
        if (!ok) {  // factor this system (its ridge already added) and keep it
            if (c.prof) c.prof->add("als.g_pcg_fallbacks", 0, 1);
            cache->factor = DeviceBuffer<float>();
            solve_spd(c.gpu, n, build, rhs.get(), g.get(), kRidge, &cache->factor, &cache->ridge);
        }
    } else {
        solve_spd(c.gpu, n, build, rhs.get(), g.get(), kRidge, cache ? &cache->factor : nullptr,
                  cache ? &cache->ridge : nullptr);
    }
    factors.paths[p].g = std::move(g);
    factors.paths[p].invalidate();
}

void als(DeviceFactors& factors, const TensorContext& c, int sweeps) {
    StageTimer st(c, "als");
    std::vector<GCache> caches(c.tuning.als_g_pcg ? factors.paths.size() : 0);
    for (int s = 0; s < sweeps; ++s) {
        // ℓ and h share the blocks K_pq (g and S_V do not change between them).
        const KBlocks kb = k_blocks(factors, c);
        solve_l(factors, c, kb);
        solve_h(factors, c, kb);
        for (size_t p = 0; p < factors.paths.size(); ++p)
            als_g(factors, c, p, c.tuning.als_g_pcg ? &caches[p] : nullptr);
    }
}

}  // namespace cortiq::encode::cuda
