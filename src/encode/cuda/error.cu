// Errors in a Gram metric X by the factor-sized expansion (SPEC §2):
//   tr(E X Eᵀ) = tr(W X Wᵀ) − 2 Σ_p ⟨left_p, W X right_p⟩ + Σ_{p,q} ⟨left_pᵀleft_q, right_pᵀ X
//   right_q⟩
// with X = H from the cached H·right and W H·right, X = H_fit = H − cI from the same
// caches, X = H_sel fresh. All inner products come back in one readback.
#include <algorithm>
#include <cmath>
#include <deque>

#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

double err(const DeviceFactors& factors, const TensorContext& c, Metric x) {
    const cudaStream_t st = c.stream();
    const size_t np = factors.paths.size();
    const int64_t m = factors.m, n = factors.n, r = factors.r;
    std::vector<DMat> left(np), right(np);
    std::deque<DMat> keep;  // products the batched sums read (stable references)
    for (size_t p = 0; p < np; ++p) {
        left[p] = factors.left(st, p);
        right[p] = factors.right(st, p);
    }
    std::vector<DMat> xg(np);  // X right_q for X = H_sel
    if (x == Metric::sel)
        for (size_t q = 0; q < np; ++q)
            xg[q] = mm(c.gpu, c.input_ctx.h_sel, false, right[q], false, c.big(n));
    SumBatch sb(st);
    std::vector<size_t> b_slots, bfit_slots;
    std::vector<std::pair<size_t, double>> c_slots, cfit_slots;  // slot, multiplicity
    for (size_t p = 0; p < np; ++p) {
        if (x == Metric::sel) {
            keep.push_back(mm(c.gpu, c.d.wh_sel, false, right[p], false, c.big(n)));
            b_slots.push_back(sb.dot(left[p].data(), keep.back().data(), m * r));
        } else {
            b_slots.push_back(sb.dot(left[p].data(), factors.wh_right(c, p).data(), m * r));
            if (x == Metric::fit) {  // W H_fit right = W H right − c W right
                keep.push_back(mm(c.gpu, c.d.w, false, right[p], false, c.big(n)));
                bfit_slots.push_back(sb.dot(left[p].data(), keep.back().data(), m * r));
            }
        }
    }
    for (size_t p = 0; p < np; ++p)
        for (size_t q = p; q < np; ++q) {
            const double mult = p == q ? 1.0 : 2.0;  // the (q,p) term equals the (p,q) term
            keep.push_back(mm(c.gpu, left[p], true, left[q], false, c.big(m)));
            const DMat& t = keep.back();
            const DMat& xq = x == Metric::sel ? xg[q] : factors.h_right(c, q);
            keep.push_back(mm(c.gpu, right[p], true, xq, false, c.big(n)));
            c_slots.emplace_back(sb.dot(t.data(), keep.back().data(), r * r), mult);
            if (x == Metric::fit) {
                keep.push_back(mm(c.gpu, right[p], true, right[q], false, c.big(n)));
                cfit_slots.emplace_back(sb.dot(t.data(), keep.back().data(), r * r), mult);
            }
        }
    const auto v = sb.read();
    double b = 0, cc = 0;
    for (size_t k : b_slots) b += v[k];
    for (size_t k : bfit_slots) b -= c.input_ctx.c_fit * v[k];
    for (auto [k, mult] : c_slots) cc += mult * v[k];
    for (auto [k, mult] : cfit_slots) cc -= c.input_ctx.c_fit * mult * v[k];
    const double a = x == Metric::h ? c.d.a_h : x == Metric::fit ? c.d.a_fit : c.d.a_sel;
    return std::max(a - 2.0 * b + cc, 0.0);
}

double rel_err(const DeviceFactors& factors, const TensorContext& c, Metric x) {
    const double a = x == Metric::h ? c.d.a_h : x == Metric::fit ? c.d.a_fit : c.d.a_sel;
    return std::sqrt(err(factors, c, x) / std::max(a, 1e-300));
}

}  // namespace cortiq::encode::cuda
