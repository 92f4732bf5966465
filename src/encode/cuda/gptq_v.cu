// Stage 7, input side, on the device (SPEC §3.7; cpu/gptq_v.cpp). The columns
// of S_V,p in act order, carried in the latent space: b_j = Mᵀ t_j for every
// column is one GEMM up front; a block of columns runs inside one thread block
// (sequential over columns, parallel over r), each column's scaled latent
// error e_j = (b_j − g_j K s_j)/Uc[j,j] feeds the later columns of its block
// from shared memory, and the trailing update of the later blocks is a GEMM.
//
// The search of one column scans its r bits in order and flips a bit when
// (sᵀb)²/sᵀKs rises by more than the tolerance, updating ks = K s. Two
// kernels make the sequential scan's decisions (Tuning::gptq_kernel): the lazy
// one (gptq_v_lazy.cu: one warp decides chunk by chunk, owner warps keep ks up
// to date from a log of the flips) and the batched one (gptq_v_batched.cu:
// the whole block updates ks after every flip). With Options::gptq_multi = Q
// > 0 the column is searched by rounds of up to Q simultaneous flips instead
// (gptq_v_multi.cu, the CPU's column_search_multi).
#include <algorithm>
#include <cmath>

#include "encode/cuda/gptq_v_kernels.hpp"
#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

int64_t gptq_v_max_rank() {
    return 16384;  // 4 r floats of shared memory per block (227 KiB on sm_90)
}

void fit_columns(GptqPlan& l, const Gpu& g, int64_t r, int block, int64_t fixed, int64_t reserve) {
    const int64_t avail = static_cast<int64_t>(g.smem_optin()) - fixed - reserve;
    const int64_t per_col = (r + 1) * static_cast<int64_t>(sizeof(float));
    l.nb = static_cast<int>(std::clamp<int64_t>(avail / per_col, 0, std::max(block, 1)));
    l.smem = static_cast<size_t>(fixed + l.nb * per_col);
}

int64_t gptq_v(DeviceFactors& factors, const TensorContext& c, size_t p, double tol, int passes,
               int block, bool feedback, int multi, int group) {
    CORTIQ_CHECK(group >= 1, "gptq_v: group {} < 1", group);
    CORTIQ_CHECK(multi >= 0 && multi <= kMaxGptqMulti,
                 "--gptq-multi {}: the CUDA encoder takes 0 (the exact scan) to {} flips per round",
                 multi, kMaxGptqMulti);
    StageTimer timer(c, "gptq_v");
    const cudaStream_t st = c.stream();
    const int64_t n = factors.n, r = factors.r;
    // rounds when asked; else the lazy kernel up to its rank (its owners hold 8
    // chunks each), else batched; with groups (Options::gptq_group) each block
    // holds one column
    const int per_block = group > 1 ? 1 : block;
    GptqPlan l;
    bool lazy = multi == 0 && c.tuning.gptq_kernel == GptqKernel::lazy;
    if (lazy) {
        l = plan_lazy(c.gpu, r, per_block);
        lazy = l.nb >= 1;
    }
    if (multi > 0)
        l = plan_multi(c.gpu, r, per_block);
    else if (!lazy)
        l = plan_batched(c.gpu, r, per_block, c.tuning.gptq_threads, c.tuning.gptq_prefetch);
    const int cap = c.tuning.gptq_log_cap;
    CORTIQ_CHECK(cap == 0 || (cap >= 64 && cap <= 4096 && (cap & (cap - 1)) == 0),
                 "gptq_log_cap must be 0 or a power of two from 64 to 4096, not {}", cap);
    CORTIQ_CHECK(r <= gptq_v_max_rank() && l.nb >= 1,
                 "gptq_v: rank {} is above the device column search's limit ({} bytes of shared "
                 "memory per block); use the CPU encoder",
                 r, c.gpu.smem_optin());
    Path& path = factors.paths[p];
    const DMat mm_p = factors.left(st, p);
    const DMat k = mm(c.gpu, mm_p, true, mm_p, false, c.big(factors.m));
    DVec kd(r, st);
    diag_of(st, k.data(), kd.get(), r);
    // Mᵀ t_j for every column: (W − Σ_{q≠p} Ŵ_q)ᵀ M
    DMat bn = mm(c.gpu, c.d.w, true, mm_p, false, c.big(factors.m));
    for (size_t q = 0; q < factors.paths.size(); ++q) {
        if (q == p) continue;
        const DMat t = mm(c.gpu, factors.left(st, q), true, mm_p, false, c.big(factors.m));
        mm_into(c.gpu, -1.f, factors.right(st, q), false, t, false, 1.f, bn, c.big(r));
    }
    DMat b(n, r, st), s(n, r, st);
    permute_rows(st, bn.data(), b.data(), c.input_ctx.perm_d.get(), n, r, false);
    bn = DMat();
    permute_rows(st, path.sv.data(), s.data(), c.input_ctx.perm_d.get(), n, r, false);
    const DMat ks0 = mm(c.gpu, s, false, k, false, c.big(r), kExactA);
    // the lazy kernel reads K with rows and columns zero-padded to chunks of 32
    const int64_t rp = (r + 31) / 32 * 32;
    DMat kpad;
    if (lazy) {
        kpad = DMat(rp, rp, st);
        copy_padded(st, k.data(), r, r, r, kpad.data(), rp, rp);
    }
    DMat e(n, r, st);
    DVec gv(n, st);
    // flips, passes run, and the lazy kernel's visits, near and far entries, waits
    constexpr int kCounts = 6;
    DeviceBuffer<unsigned long long> counts(kCounts, st);
    CUDA_CHECK(cudaMemsetAsync(counts.get(), 0, kCounts * sizeof(unsigned long long), st));
    GptqArgs a{.b = b.data(),
               .s = s.data(),
               .ks0 = ks0.data(),
               .k = lazy ? kpad.data() : k.data(),
               .kd = kd.get(),
               .uc = c.input_ctx.uc.data(),
               .e = e.data(),
               .g = gv.get(),
               .n = n,
               .r = r,
               .j0 = 0,
               .j1 = 0,
               .tol = flip_tol_f32(tol),
               .passes = passes,
               .feedback = feedback ? 1 : 0,
               .flips = counts.get(),
               .passes_run = counts.get() + 1,
               .ldk = lazy ? rp : r,
               .stats = counts.get() + 2,
               .log_cap = c.tuning.gptq_log_cap,
               .multi = multi};
    if (multi > 0)
        prepare_multi(l);
    else if (lazy)
        prepare_lazy(l);
    else
        prepare_batched(l);
    // a launch: the block's nb columns in order, or a group of columns side by
    // side, one per block, groups never crossing a multiple of `block` (the
    // CPU's blocks); either way its errors reach the later columns below
    CORTIQ_CHECK(block >= 1, "gptq_v: block {} < 1", block);
    for (int64_t j0 = 0, j1 = 0; j0 < n; j0 = j1) {
        j1 = group > 1 ? std::min({n, j0 + group, (j0 / block + 1) * block})
                       : std::min(n, j0 + static_cast<int64_t>(l.nb));
        a.j0 = j0;
        a.j1 = j1;
        l.grid = group > 1 ? static_cast<int>(j1 - j0) : 1;
        if (multi > 0)
            launch_multi(c.gpu, a, l);
        else if (lazy)
            launch_lazy(c.gpu, a, l);
        else
            launch_batched(c.gpu, a, l);
        if (!feedback || j1 >= n) continue;
        // trailing update: B[j1:] −= Uc[j0:j1, j1:]ᵀ E[j0:j1]
        gemm(c.gpu, true, false, n - j1, r, j1 - j0, -1.f, c.input_ctx.uc.data() + j0 * n + j1, n,
             e.data() + j0 * r, r, 1.f, b.data() + j1 * r, r);
    }
    permute_rows(st, s.data(), path.sv.data(), c.input_ctx.perm_d.get(), n, r, true);
    scatter(st, gv.get(), path.g.get(), c.input_ctx.perm_d.get(), n);
    path.invalidate();
    unsigned long long total[kCounts] = {};
    CUDA_CHECK(cudaMemcpyAsync(total, counts.get(), sizeof total, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    if (c.prof) {
        c.prof->add("gptq_v.flips", 0, static_cast<long long>(total[0]));
        c.prof->add("gptq_v.passes", 0, static_cast<long long>(total[1]));
        if (lazy) {
            c.prof->add("gptq_v.visits", 0, static_cast<long long>(total[2]));
            c.prof->add("gptq_v.near", 0, static_cast<long long>(total[3]));
            c.prof->add("gptq_v.far", 0, static_cast<long long>(total[4]));
            c.prof->add("gptq_v.waits", 0, static_cast<long long>(total[5]));
        }
    }
    return static_cast<int64_t>(total[0]);
}

}  // namespace cortiq::encode::cuda
