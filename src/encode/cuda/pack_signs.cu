// Stage 9's sign stream on the device (SPEC §4, blr/layout.hpp), so that the
// signs never travel to the host as float matrices: byte t of the version-2
// stream holds bits 8t … 8t+7, and bit b is set where the entry it stands for
// is −1 — path p's S_Vᵀ (r rows of n bits), then its S_Uᵀ (r rows of m bits).
// The same bits as blr::write_signs (the test compares the bytes).
#include "blr/layout.hpp"
#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

namespace {

struct SignSources {
    const float* su[2];  // m × r, row-major
    const float* sv[2];  // n × r
};

__global__ void k_pack_signs(SignSources src, uint64_t m, uint64_t n, uint64_t r, uint64_t paths,
                             uint64_t bytes, uint8_t* out) {
    const uint64_t t = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= bytes) return;
    const uint64_t per_path = r * (m + n), total = paths * per_path;
    unsigned v = 0;
    for (unsigned q = 0; q < 8; ++q) {
        const uint64_t b = 8 * t + q;
        if (b >= total) break;  // the stream's padding to whole words stays zero
        const uint64_t p = b / per_path;
        uint64_t rem = b - p * per_path;
        float x;
        if (rem < r * n) {  // S_Vᵀ row k, entry j
            const uint64_t k = rem / n, j = rem - k * n;
            x = src.sv[p][j * r + k];
        } else {  // S_Uᵀ row k, entry i
            rem -= r * n;
            const uint64_t k = rem / m, i = rem - k * m;
            x = src.su[p][i * r + k];
        }
        if (x < 0) v |= 1u << q;
    }
    out[t] = static_cast<uint8_t>(v);
}

}  // namespace

std::vector<uint8_t> pack_payload(const DeviceFactors& f, cudaStream_t st, blr::Factors* stored) {
    const uint64_t np = f.paths.size(), m = f.m, n = f.n, r = f.r;
    CORTIQ_ASSERT(np >= 1 && np <= 2, "pack: {} paths", np);
    blr::Factors scales;  // h, ℓ, g only: pack_scales does not read the signs
    scales.m = f.m;
    scales.n = f.n;
    scales.r = f.r;
    SignSources src{};
    for (uint64_t p = 0; p < np; ++p) {
        const Path& q = f.paths[p];
        CORTIQ_ASSERT(q.su.rows == f.m && q.su.cols == f.r && q.sv.rows == f.n && q.sv.cols == f.r,
                      "pack: path {} signs {}x{} and {}x{} for m={} n={} r={}", p, q.su.rows,
                      q.su.cols, q.sv.rows, q.sv.cols, f.m, f.n, f.r);
        blr::Path hp;
        hp.h = download(q.h, st);
        hp.l = download(q.l, st);
        hp.g = download(q.g, st);
        scales.paths.push_back(std::move(hp));
        src.su[p] = q.su.data();
        src.sv[p] = q.sv.data();
    }
    std::vector<uint8_t> out = blr::pack_scales(scales, stored);
    const uint64_t off = blr::off_signs(m, n, r, np), bytes = out.size() - off;
    DeviceBuffer<uint8_t> stream(bytes, st);
    constexpr unsigned kThreads = 256;
    k_pack_signs<<<static_cast<unsigned>((bytes + kThreads - 1) / kThreads), kThreads, 0, st>>>(
        src, m, n, r, np, bytes, stream.get());
    CUDA_LAUNCH_CHECK();
    CUDA_CHECK(cudaMemcpyAsync(out.data() + off, stream.get(), bytes, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    return out;
}

}  // namespace cortiq::encode::cuda
