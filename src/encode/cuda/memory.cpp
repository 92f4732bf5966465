// The device-memory budget of one tensor: an upper estimate of the peak bytes
// the encoder allocates, checked before any work starts, so that a tensor too
// large for the free memory is a clear error (or a CPU fallback in
// encode_many), never an out-of-memory crash halfway.
#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"
#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

namespace {

// Floats live at once for one candidate of rank r with P paths: the model and
// its refinement trial (signs, caches) plus the largest stage's temporaries.
double candidate_floats(double m, double n, double r, int paths, bool g_pcg) {
    const double model = paths * (2 * (m + n) * r + (m + n + r));      // su, sv, hg, whg, scales
    const double itq = 2 * (m + n) * r + 6 * r * r + 2 * (m + n) * r;  // X, XR, NS; U_p, V_p
    // system + products; with PCG a kept factor per path and the new system
    const double als_g = (g_pcg ? paths + 1 : 1) * n * n + 4 * n * r + 3 * m * r + 4 * r * r;
    const double gptq = 6 * n * r + 2 * r * r + m * r;  // b, s, ks0, e, bn
    const double flip = 3 * m * r + 3 * r * r;
    const double residual = paths == 2 ? 2 * m * n : 0.0;  // res, res·H
    const double err = 4 * (m + n) * r + 4 * r * r;
    const double temps = std::max({itq, als_g, gptq, flip, err}) + residual;
    return 2 * model + temps;
}

}  // namespace

size_t context_bytes(int64_t m, int64_t n) {
    const double nn = static_cast<double>(n) * static_cast<double>(n);
    // H, H_sel, Uc; while building: the equilibrated factor and its inverse; L when m > n
    return static_cast<size_t>(4.0 * (5 * nn + (m > n ? nn : 0.0)));
}

size_t estimate_bytes(int64_t m_, int64_t n_, const Options& o, bool with_context,
                      const Tuning& tuning) {
    const double m = static_cast<double>(m_), n = static_cast<double>(n_);
    const double k = std::min(m, n);
    const int64_t r1 = o.paths != PathsChoice::two ? blr::rank_for(m_, n_, o.bpw, 1) : 0;
    const int64_t r2 = o.paths != PathsChoice::one ? blr::rank_for(m_, n_, o.bpw, 2) : 0;
    const double rmax = static_cast<double>(std::max<int64_t>({r1, r2, 1}));
    double floats = 3 * m * n;  // W, W·H, W·H_sel
    // latents: the float64 Gram, its eigensolver workspace and vectors, float64
    // copies of the targets, T·L when m > n, the cache
    floats += 8 * k * k + 4 * m * n + (m > n ? m * n : 0.0) + 2 * m * rmax;
    const double c1 =
        r1 >= 1 ? candidate_floats(m, n, static_cast<double>(r1), 1, tuning.als_g_pcg) : 0.0;
    const double c2 =
        r2 >= 1 ? candidate_floats(m, n, static_cast<double>(r2), 2, tuning.als_g_pcg) : 0.0;
    if (tuning.parallel_candidates)
        floats += c1 + c2;
    else
        floats += std::max(c1, c2) + (r1 >= 1 && r2 >= 1 ? c2 / 2 : 0.0);  // the kept candidate
    // 3xTF32 splits each operand into two copies (H, W·H: n × n and m × n), in
    // each candidate stream at once
    if (static_cast<double>(tuning.x3_min_k) <= std::max(m, n))
        floats += (tuning.parallel_candidates ? 2 : 1) * 2 * (n * n + m * n);
    if (o.method == Method::rtn_sign) floats = 6 * m * n + n * n;
    double bytes = 4.0 * floats * 1.15 + 256.0 * (1 << 20);  // + library workspaces
    if (with_context) bytes += static_cast<double>(context_bytes(m_, n_));
    return static_cast<size_t>(bytes);
}

void ensure_fits(int64_t m, int64_t n, const Options& o, bool with_context, const Tuning& tuning) {
    const size_t need = estimate_bytes(m, n, o, with_context, tuning);
    const size_t free_b = device_free_bytes();
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    CORTIQ_CHECK(need <= free_b,
                 "{}x{} at {} bpw needs about {:.1f} GiB of GPU memory but GPU {} has {:.1f} GiB "
                 "free (of {:.1f} GiB); free the device or use --device cpu",
                 m, n, o.bpw, static_cast<double>(need) / kGiB, device,
                 static_cast<double>(free_b) / kGiB,
                 static_cast<double>(device_total_bytes()) / kGiB);
}

}  // namespace cortiq::encode::cuda
