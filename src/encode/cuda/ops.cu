// Element-wise and reduction kernels of the CUDA encoder. Reductions run in a
// fixed order (per-block partial sums, then one block over the partials), so
// they are bit-reproducible.
#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "encode/cuda/ops.hpp"

namespace cortiq::encode::cuda {

namespace {

constexpr int kThreads = 256;

int grid_for(int64_t n, int threads = kThreads) {
    const int64_t b = (n + threads - 1) / threads;
    return static_cast<int>(std::clamp<int64_t>(b, 1, 8192));
}

__device__ inline int64_t gtid() {
    return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t gstride() {
    return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

__device__ inline double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block in a fixed order; the result is valid in thread 0.
template <int Threads>
__device__ double block_sum(double v) {
    __shared__ double red[Threads / 32];
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    double s = 0;
    if (warp == 0) {
        s = lane < Threads / 32 ? red[lane] : 0.0;
        s = warp_sum(s);
    }
    __syncthreads();
    return s;
}

__global__ void k_scale_rc(float* out, const float* s, const float* rows, const float* cols,
                           int64_t m, int64_t r) {
    for (int64_t idx = gtid(); idx < m * r; idx += gstride()) {
        const int64_t i = idx / r, k = idx - i * r;
        float v = s[idx];
        if (rows) v *= rows[i];
        if (cols) v *= cols[k];
        out[idx] = v;
    }
}

__global__ void k_sign_abs(const float* x, float* sgn, float* mag, int64_t n) {
    for (int64_t i = gtid(); i < n; i += gstride()) {
        const float v = x[i];
        if (sgn) sgn[i] = v >= 0.f ? 1.f : -1.f;
        if (mag) mag[i] = fabsf(v);
    }
}

__global__ void k_weighted_sign(float* x, const float* w, int64_t rows, int64_t cols,
                                int64_t active) {
    for (int64_t idx = gtid(); idx < rows * cols; idx += gstride()) {
        const int64_t row = idx / cols;
        const float wi = idx - row * cols < active ? w[row] : 0.f;
        x[idx] = x[idx] >= 0.f ? wi : -wi;
    }
}

// One warp per row.
__global__ void k_row_normalize(float* x, int64_t rows, int64_t cols) {
    const int64_t warp = gtid() >> 5;
    const int lane = threadIdx.x & 31;
    if (warp >= rows) return;
    float* row = x + warp * cols;
    double s = 0;
    for (int64_t k = lane; k < cols; k += 32) s += static_cast<double>(row[k]) * row[k];
    s = warp_sum(s);
    s = __shfl_sync(0xffffffffu, s, 0);
    const double nr = sqrt(s);
    const float inv = nr > 0 ? static_cast<float>(1.0 / nr) : 0.f;
    for (int64_t k = lane; k < cols; k += 32) row[k] = nr > 0 ? row[k] * inv : 0.f;
}

__global__ void k_axpby(float* x, float a, const float* y, float b, int64_t n) {
    for (int64_t i = gtid(); i < n; i += gstride()) x[i] = a * x[i] + b * y[i];
}

__global__ void k_axpby_2d(float* x, int64_t ldx, float a, const float* y, int64_t ldy, float b,
                           int64_t rows, int64_t cols) {
    for (int64_t idx = gtid(); idx < rows * cols; idx += gstride()) {
        const int64_t i = idx / cols, j = idx - i * cols;
        const float by = b * y[i * ldy + j];
        x[i * ldx + j] = a == 0.f ? by : a * x[i * ldx + j] + by;
    }
}

__global__ void k_scal(float* x, float a, int64_t n) {
    for (int64_t i = gtid(); i < n; i += gstride()) x[i] *= a;
}

__global__ void k_hadamard(float* a, const float* h, int64_t n) {
    for (int64_t i = gtid(); i < n; i += gstride()) a[i] *= h[i];
}

__global__ void k_hadamard_block(float* dst, int64_t ld, const float* a, const float* b,
                                 int64_t r) {
    for (int64_t idx = gtid(); idx < r * r; idx += gstride()) {
        const int64_t k = idx / r, k2 = idx - k * r;
        dst[k * ld + k2] = a[idx] * b[idx];
    }
}

__global__ void k_add_diag(float* a, int64_t n, float v) {
    for (int64_t i = gtid(); i < n; i += gstride()) a[i * n + i] += v;
}

__global__ void k_identity(float* a, int64_t n) {
    for (int64_t idx = gtid(); idx < n * n; idx += gstride()) {
        const int64_t i = idx / n, j = idx - i * n;
        a[idx] = i == j ? 1.f : 0.f;
    }
}

__global__ void k_permute_rows(const float* src, float* dst, const int* perm, int64_t rows,
                               int64_t cols, bool inverse) {
    for (int64_t idx = gtid(); idx < rows * cols; idx += gstride()) {
        const int64_t j = idx / cols, c = idx - j * cols;
        const int64_t pj = perm[j];
        if (inverse)
            dst[pj * cols + c] = src[idx];
        else
            dst[idx] = src[pj * cols + c];
    }
}

__global__ void k_scatter(const float* src, float* dst, const int* perm, int64_t n) {
    for (int64_t j = gtid(); j < n; j += gstride()) dst[perm[j]] = src[j];
}

__global__ void k_row_error_matrix(const float* k, const float* l, float* q, float* qdiag,
                                   int64_t r) {
    for (int64_t idx = gtid(); idx < r * r; idx += gstride()) {
        const int64_t a = idx / r, b = idx - a * r;
        const float v = l[a] * k[idx] * l[b];
        q[idx] = v;
        if (a == b) qdiag[a] = v;
    }
}

__global__ void k_diag(const float* a, float* d, int64_t n) {
    for (int64_t i = gtid(); i < n; i += gstride()) d[i] = a[i * n + i];
}

// out(i,c) = ev[(count-1-c)·k + i]; consecutive threads read consecutive i.
__global__ void k_gather_eigvecs_f64(const double* ev, int64_t k, int64_t count, int64_t r,
                                     float* out) {
    for (int64_t idx = gtid(); idx < k * r; idx += gstride()) {
        const int64_t c = idx / k, i = idx - c * k;
        out[i * r + c] = static_cast<float>(ev[(count - 1 - c) * k + i]);
    }
}

__global__ void k_to_f64(const float* x, double* y, int64_t n) {
    for (int64_t i = gtid(); i < n; i += gstride()) y[i] = x[i];
}

__global__ void k_equilibrate(const float* h, const float* sqd, const int* perm_rev, float* a,
                              int64_t n, float ridge) {
    for (int64_t idx = gtid(); idx < n * n; idx += gstride()) {
        const int64_t i = idx / n, j = idx - i * n;
        const int64_t pi = perm_rev ? perm_rev[i] : i, pj = perm_rev ? perm_rev[j] : j;
        float v = h[pi * n + pj] / (sqd[pi] * sqd[pj]);
        if (i == j) v += ridge;
        a[idx] = v;
    }
}

__global__ void k_make_uc(const float* linv, const float* sqd_perm, float* uc, int64_t n) {
    for (int64_t idx = gtid(); idx < n * n; idx += gstride()) {
        const int64_t i = idx / n, j = idx - i * n;
        uc[idx] = j >= i ? linv[(n - 1 - i) * n + (n - 1 - j)] / sqd_perm[j] : 0.f;
    }
}

__global__ void k_make_l(float* l, const float* sqd, int64_t n) {
    for (int64_t idx = gtid(); idx < n * n; idx += gstride()) {
        const int64_t i = idx / n, j = idx - i * n;
        l[idx] = j <= i ? l[idx] * sqd[i] : 0.f;
    }
}

__global__ void k_zero_upper(float* a, int64_t n) {
    for (int64_t idx = gtid(); idx < n * n; idx += gstride()) {
        const int64_t i = idx / n, j = idx - i * n;
        if (j > i) a[idx] = 0.f;
    }
}

__global__ void k_residual_rc(const float* w, const float* s, const float* h, const float* g,
                              float* e, int64_t m, int64_t n) {
    for (int64_t idx = gtid(); idx < m * n; idx += gstride()) {
        const int64_t i = idx / n, j = idx - i * n;
        e[idx] = w[idx] - h[i] * s[idx] * g[j];
    }
}

// One warp per row.
__global__ void k_rowdot(const float* a, const float* b, int64_t rows, int64_t cols, float* out) {
    const int64_t warp = gtid() >> 5;
    const int lane = threadIdx.x & 31;
    if (warp >= rows) return;
    const float* ra = a + warp * cols;
    const float* rb = b + warp * cols;
    double s = 0;
    for (int64_t k = lane; k < cols; k += 32) s += static_cast<double>(ra[k]) * rb[k];
    s = warp_sum(s);
    if (lane == 0) out[warp] = static_cast<float>(s);
}

// partial[chunk][k] = Σ_{i in chunk} a(i,k) b(i,k)
__global__ void k_coldot_partial(const float* a, const float* b, int64_t rows, int64_t cols,
                                 int64_t chunk, double* partial) {
    const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= cols) return;
    const int64_t i0 = blockIdx.y * chunk, i1 = min(rows, i0 + chunk);
    double s = 0;
    for (int64_t i = i0; i < i1; ++i)
        s += b ? static_cast<double>(a[i * cols + k]) * b[i * cols + k] : a[i * cols + k];
    partial[blockIdx.y * cols + k] = s;
}

__global__ void k_coldot_final(const double* partial, int64_t chunks, int64_t cols, float* out) {
    for (int64_t k = gtid(); k < cols; k += gstride()) {
        double s = 0;
        for (int64_t c = 0; c < chunks; ++c) s += partial[c * cols + k];
        out[k] = static_cast<float>(s);
    }
}

struct DotF {
    const float* a;
    const float* b;
    __device__ double operator()(int64_t i) const {
        return static_cast<double>(a[i]) * static_cast<double>(b[i]);
    }
};
struct DevIdF {
    const float* a;
    int64_t r, ones;
    __device__ double operator()(int64_t i) const {
        const int64_t row = i / r, col = i - row * r;
        const double d = static_cast<double>(a[i]) - (row == col && row < ones ? 1.0 : 0.0);
        return d * d;
    }
};
struct WAbsF {
    const float* x;
    const float* w;
    int64_t cols;
    __device__ double operator()(int64_t i) const {
        return static_cast<double>(w[i / cols]) * fabs(static_cast<double>(x[i]));
    }
};
struct DiagF {
    const float* a;
    int64_t n;
    bool absval;
    __device__ double operator()(int64_t i) const {
        const double v = a[i * n + i];
        return absval ? fabs(v) : v;
    }
};

template <class F>
__global__ void k_partial(F f, int64_t n, double* partial) {
    double s = 0;
    for (int64_t i = gtid(); i < n; i += gstride()) s += f(i);
    s = block_sum<kThreads>(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void k_final(const double* partial, int blocks, double* out) {
    double s = 0;
    for (int i = threadIdx.x; i < blocks; i += blockDim.x) s += partial[blockIdx.x * blocks + i];
    s = block_sum<kThreads>(s);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}

__device__ inline uint64_t splitmix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__global__ void k_fill_normal(float* x, int64_t n, uint64_t seed, uint64_t stream, float scale) {
    const uint64_t base = splitmix(seed * 0x632BE59BD9B4E019ull + stream);
    for (int64_t i = gtid(); i < n; i += gstride()) {
        const uint64_t h1 = splitmix(base ^ (2 * static_cast<uint64_t>(i)));
        const uint64_t h2 = splitmix(base ^ (2 * static_cast<uint64_t>(i) + 1));
        const double u1 = fmax(static_cast<double>(h1 >> 11) * 0x1.0p-53, 1e-300);
        const double u2 = static_cast<double>(h2 >> 11) * 0x1.0p-53;
        x[i] = scale * static_cast<float>(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

}  // namespace

void scale_rc(cudaStream_t st, float* out, const float* s, const float* rows, const float* cols,
              int64_t m, int64_t r) {
    if (m * r == 0) return;
    k_scale_rc<<<grid_for(m * r), kThreads, 0, st>>>(out, s, rows, cols, m, r);
    CUDA_LAUNCH_CHECK();
}

void scale_rc_inplace(cudaStream_t st, float* a, const float* rows, const float* cols, int64_t m,
                      int64_t r) {
    scale_rc(st, a, a, rows, cols, m, r);
}

void sign_abs(cudaStream_t st, const float* x, float* sgn, float* mag, int64_t n) {
    if (n == 0) return;
    k_sign_abs<<<grid_for(n), kThreads, 0, st>>>(x, sgn, mag, n);
    CUDA_LAUNCH_CHECK();
}

void weighted_sign(cudaStream_t st, float* x, const float* w, int64_t rows, int64_t cols,
                   int64_t active) {
    if (rows * cols == 0) return;
    k_weighted_sign<<<grid_for(rows * cols), kThreads, 0, st>>>(x, w, rows, cols,
                                                                active < 0 ? cols : active);
    CUDA_LAUNCH_CHECK();
}

void row_normalize(cudaStream_t st, float* x, int64_t rows, int64_t cols) {
    if (rows == 0) return;
    const int64_t blocks = (rows * 32 + kThreads - 1) / kThreads;
    k_row_normalize<<<static_cast<unsigned>(blocks), kThreads, 0, st>>>(x, rows, cols);
    CUDA_LAUNCH_CHECK();
}

void axpby(cudaStream_t st, float* x, float a, const float* y, float b, int64_t n) {
    if (n == 0) return;
    k_axpby<<<grid_for(n), kThreads, 0, st>>>(x, a, y, b, n);
    CUDA_LAUNCH_CHECK();
}

void axpby_2d(cudaStream_t st, float* x, int64_t ldx, float a, const float* y, int64_t ldy, float b,
              int64_t rows, int64_t cols) {
    if (rows * cols == 0) return;
    k_axpby_2d<<<grid_for(rows * cols), kThreads, 0, st>>>(x, ldx, a, y, ldy, b, rows, cols);
    CUDA_LAUNCH_CHECK();
}

void scal(cudaStream_t st, float* x, float a, int64_t n) {
    if (n == 0) return;
    k_scal<<<grid_for(n), kThreads, 0, st>>>(x, a, n);
    CUDA_LAUNCH_CHECK();
}

void hadamard_inplace(cudaStream_t st, float* a, const float* h, int64_t n) {
    if (n == 0) return;
    k_hadamard<<<grid_for(n * n), kThreads, 0, st>>>(a, h, n * n);
    CUDA_LAUNCH_CHECK();
}

void hadamard_block(cudaStream_t st, float* dst, int64_t ld, const float* a, const float* b,
                    int64_t r) {
    if (r == 0) return;
    k_hadamard_block<<<grid_for(r * r), kThreads, 0, st>>>(dst, ld, a, b, r);
    CUDA_LAUNCH_CHECK();
}

void add_diag(cudaStream_t st, float* a, int64_t n, float v) {
    if (n == 0) return;
    k_add_diag<<<grid_for(n), kThreads, 0, st>>>(a, n, v);
    CUDA_LAUNCH_CHECK();
}

void copy_padded(cudaStream_t st, const float* src, int64_t rows, int64_t cols, int64_t ld,
                 float* dst, int64_t prows, int64_t pcols) {
    CORTIQ_ASSERT(prows >= rows && pcols >= cols, "padding {}x{} into {}x{}", rows, cols, prows,
                  pcols);
    if (prows != rows || pcols != cols)
        CUDA_CHECK(cudaMemsetAsync(dst, 0, prows * pcols * sizeof(float), st));
    if (rows * cols == 0) return;
    CUDA_CHECK(cudaMemcpy2DAsync(dst, pcols * sizeof(float), src, ld * sizeof(float),
                                 cols * sizeof(float), rows, cudaMemcpyDeviceToDevice, st));
}

void set_identity(cudaStream_t st, float* a, int64_t n) {
    if (n == 0) return;
    k_identity<<<grid_for(n * n), kThreads, 0, st>>>(a, n);
    CUDA_LAUNCH_CHECK();
}

void permute_rows(cudaStream_t st, const float* src, float* dst, const int* perm, int64_t rows,
                  int64_t cols, bool inverse) {
    if (rows * cols == 0) return;
    k_permute_rows<<<grid_for(rows * cols), kThreads, 0, st>>>(src, dst, perm, rows, cols, inverse);
    CUDA_LAUNCH_CHECK();
}

void scatter(cudaStream_t st, const float* src, float* dst, const int* perm, int64_t n) {
    if (n == 0) return;
    k_scatter<<<grid_for(n), kThreads, 0, st>>>(src, dst, perm, n);
    CUDA_LAUNCH_CHECK();
}

void row_error_matrix(cudaStream_t st, const float* k, const float* l, float* q, float* qdiag,
                      int64_t r) {
    if (r == 0) return;
    k_row_error_matrix<<<grid_for(r * r), kThreads, 0, st>>>(k, l, q, qdiag, r);
    CUDA_LAUNCH_CHECK();
}

void diag_of(cudaStream_t st, const float* a, float* d, int64_t n) {
    if (n == 0) return;
    k_diag<<<grid_for(n), kThreads, 0, st>>>(a, d, n);
    CUDA_LAUNCH_CHECK();
}

void gather_eigvecs_f64(cudaStream_t st, const double* ev, int64_t k, int64_t count, int64_t r,
                        float* out) {
    if (k * r == 0) return;
    k_gather_eigvecs_f64<<<grid_for(k * r), kThreads, 0, st>>>(ev, k, count, r, out);
    CUDA_LAUNCH_CHECK();
}

void to_f64(cudaStream_t st, const float* x, double* y, int64_t n) {
    if (n == 0) return;
    k_to_f64<<<grid_for(n), kThreads, 0, st>>>(x, y, n);
    CUDA_LAUNCH_CHECK();
}

void equilibrate(cudaStream_t st, const float* h, const float* sqd, const int* perm_rev, float* a,
                 int64_t n, float ridge) {
    if (n == 0) return;
    k_equilibrate<<<grid_for(n * n), kThreads, 0, st>>>(h, sqd, perm_rev, a, n, ridge);
    CUDA_LAUNCH_CHECK();
}

void make_uc(cudaStream_t st, const float* linv, const float* sqd_perm, float* uc, int64_t n) {
    if (n == 0) return;
    k_make_uc<<<grid_for(n * n), kThreads, 0, st>>>(linv, sqd_perm, uc, n);
    CUDA_LAUNCH_CHECK();
}

void make_l(cudaStream_t st, float* l, const float* sqd, int64_t n) {
    if (n == 0) return;
    k_make_l<<<grid_for(n * n), kThreads, 0, st>>>(l, sqd, n);
    CUDA_LAUNCH_CHECK();
}

void zero_upper(cudaStream_t st, float* a, int64_t n) {
    if (n == 0) return;
    k_zero_upper<<<grid_for(n * n), kThreads, 0, st>>>(a, n);
    CUDA_LAUNCH_CHECK();
}

void residual_rc(cudaStream_t st, const float* w, const float* s, const float* h, const float* g,
                 float* e, int64_t m, int64_t n) {
    if (m * n == 0) return;
    k_residual_rc<<<grid_for(m * n), kThreads, 0, st>>>(w, s, h, g, e, m, n);
    CUDA_LAUNCH_CHECK();
}

void rowdot(cudaStream_t st, const float* a, const float* b, int64_t rows, int64_t cols,
            float* out) {
    if (rows == 0) return;
    const int64_t blocks = (rows * 32 + kThreads - 1) / kThreads;
    k_rowdot<<<static_cast<unsigned>(blocks), kThreads, 0, st>>>(a, b, rows, cols, out);
    CUDA_LAUNCH_CHECK();
}

void coldot(cudaStream_t st, const float* a, const float* b, int64_t rows, int64_t cols,
            float* out) {
    if (cols == 0) return;
    const int64_t chunks = std::clamp<int64_t>(rows / 64, 1, 256);
    const int64_t chunk = (rows + chunks - 1) / chunks;
    DeviceBuffer<double> partial(chunks * cols, st);
    const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads),
                    static_cast<unsigned>(chunks));
    k_coldot_partial<<<grid, kThreads, 0, st>>>(a, b, rows, cols, chunk, partial.get());
    CUDA_LAUNCH_CHECK();
    k_coldot_final<<<grid_for(cols), kThreads, 0, st>>>(partial.get(), chunks, cols, out);
    CUDA_LAUNCH_CHECK();
}

double mean_abs_diag(cudaStream_t st, const float* a, int64_t n) {
    if (n == 0) return 0.0;
    SumBatch sb(st);
    sb.trace(a, n, /*absval=*/true);
    return sb.read()[0] / static_cast<double>(n);
}

SumBatch::SumBatch(cudaStream_t st)
    : st_(st), partial_(kMaxTerms * kBlocks, st), out_(kMaxTerms, st) {}

size_t SumBatch::dot(const float* a, const float* b, int64_t n) {
    if (terms_ >= kMaxTerms) fail_call("cortiq", "SumBatch::dot", __FILE__, __LINE__, "too many");
    k_partial<<<kBlocks, kThreads, 0, st_>>>(DotF{a, b}, n, partial_.get() + terms_ * kBlocks);
    CUDA_LAUNCH_CHECK();
    return static_cast<size_t>(terms_++);
}

size_t SumBatch::dev_identity(const float* a, int64_t r, int64_t ones) {
    if (terms_ >= kMaxTerms) fail_call("cortiq", "SumBatch::dev", __FILE__, __LINE__, "too many");
    k_partial<<<kBlocks, kThreads, 0, st_>>>(DevIdF{a, r, ones < 0 ? r : ones}, r * r,
                                             partial_.get() + terms_ * kBlocks);
    CUDA_LAUNCH_CHECK();
    return static_cast<size_t>(terms_++);
}

size_t SumBatch::weighted_abs(const float* x, const float* w, int64_t rows, int64_t cols) {
    if (terms_ >= kMaxTerms) fail_call("cortiq", "SumBatch::wabs", __FILE__, __LINE__, "too many");
    k_partial<<<kBlocks, kThreads, 0, st_>>>(WAbsF{x, w, cols}, rows * cols,
                                             partial_.get() + terms_ * kBlocks);
    CUDA_LAUNCH_CHECK();
    return static_cast<size_t>(terms_++);
}

size_t SumBatch::trace(const float* a, int64_t n, bool absval) {
    if (terms_ >= kMaxTerms) fail_call("cortiq", "SumBatch::trace", __FILE__, __LINE__, "too many");
    k_partial<<<kBlocks, kThreads, 0, st_>>>(DiagF{a, n, absval}, n,
                                             partial_.get() + terms_ * kBlocks);
    CUDA_LAUNCH_CHECK();
    return static_cast<size_t>(terms_++);
}

std::vector<double> SumBatch::read() {
    std::vector<double> v(static_cast<size_t>(terms_));
    if (terms_ > 0) {
        k_final<<<terms_, kThreads, 0, st_>>>(partial_.get(), kBlocks, out_.get());
        CUDA_LAUNCH_CHECK();
        CUDA_CHECK(cudaMemcpyAsync(v.data(), out_.get(), v.size() * sizeof(double),
                                   cudaMemcpyDeviceToHost, st_));
        CUDA_CHECK(cudaStreamSynchronize(st_));
    }
    terms_ = 0;
    return v;
}

double dot(cudaStream_t st, const float* a, const float* b, int64_t n) {
    SumBatch sb(st);
    sb.dot(a, b, n);
    return sb.read()[0];
}

void fill_normal(cudaStream_t st, float* x, int64_t n, uint64_t seed, uint64_t stream,
                 float scale) {
    if (n == 0) return;
    k_fill_normal<<<grid_for(n), kThreads, 0, st>>>(x, n, seed, stream, scale);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::encode::cuda
