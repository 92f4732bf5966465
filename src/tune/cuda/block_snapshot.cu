// Block tuning's kept epoch on the device (tune/cuda/block.hpp, snapshot_into):
// the values tuning changes, with the signs packed one bit each, so that
// keeping an epoch moves nothing to the host and the epoch kept reaches the
// host once, at the end. The float signs are ±1 (0 in the padding columns),
// which their bits give back exactly (expand_signs).
#include "core/error.hpp"
#include "tune/cuda/block.hpp"

namespace cortiq::tune::cuda {

namespace {

constexpr int kThreads = 256;

// count += Σ_w popcount(a[w] xor b[w]); integer sums, so the order of the
// atomic additions does not change the result.
__global__ void differing_bits_kernel(const uint32_t* a, const uint32_t* b, int64_t words,
                                      unsigned long long* count) {
    unsigned long long n = 0;
    for (int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; w < words;
         w += static_cast<int64_t>(gridDim.x) * blockDim.x)
        n += static_cast<unsigned long long>(__popc(a[w] ^ b[w]));
    for (int off = 16; off > 0; off /= 2) n += __shfl_down_sync(0xffffffffu, n, off);
    if ((threadIdx.x & 31) == 0 && n > 0) atomicAdd(count, n);
}

void copy_into(const DVec& src, DVec& dst, cudaStream_t st) {
    if (dst.size() != src.size()) dst = DVec(src.size(), st);
    if (src.size() > 0)
        CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), sizeof(float) * src.size(),
                                   cudaMemcpyDeviceToDevice, st));
}

void copy_bits(const DeviceBuffer<uint32_t>& src, DeviceBuffer<uint32_t>& dst, cudaStream_t st) {
    if (dst.size() != src.size()) dst = DeviceBuffer<uint32_t>(src.size(), st);
    if (src.size() > 0)
        CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), sizeof(uint32_t) * src.size(),
                                   cudaMemcpyDeviceToDevice, st));
}

// A float sign matrix (n values) as bits, into `bits` (sized here once).
void pack_into(const Gpu& g, const DVec& signs, DeviceBuffer<uint32_t>& bits) {
    const int64_t words = (signs.size() + 31) / 32;
    if (bits.size() != words) bits = DeviceBuffer<uint32_t>(words, g.stream());
    pack_signs(g, signs.get(), signs.size(), bits.get());
}

// The bits of `rows` × rp signs into float signs, `out` sized here once.
void expand_into(const Gpu& g, const DeviceBuffer<uint32_t>& bits, int64_t rows, const DBlr& b,
                 DVec& out) {
    if (out.size() != rows * b.rp) out = DVec(rows * b.rp, g.stream());
    expand_signs(g, bits.get(), rows, b.r, b.rp, out.get());
}

// What both directions copy as it is: the norm weights, and a path's scales.
void copy_norms(const DBlockParams& from, DBlockParams& to, cudaStream_t st) {
    copy_into(from.in_norm, to.in_norm, st);
    copy_into(from.post_norm, to.post_norm, st);
    copy_into(from.q_norm, to.q_norm, st);
    copy_into(from.k_norm, to.k_norm, st);
}
void copy_scales(const DBlrPath& from, DBlrPath& to, cudaStream_t st) {
    copy_into(from.h, to.h, st);
    copy_into(from.l, to.l, st);
    copy_into(from.g, to.g, st);
}

DBlr& same_shape(const DBlr& from, std::optional<DBlr>& to) {
    if (!to || to->m != from.m || to->n != from.n || to->rp != from.rp ||
        to->paths.size() != from.paths.size())
        to = DBlr{from.m, from.n, from.r, from.rp, std::vector<DBlrPath>(from.paths.size())};
    return *to;
}

}  // namespace

void snapshot_into(const Gpu& g, const DBlockParams& d, DBlockParams& snap) {
    const cudaStream_t st = g.stream();
    snap.delta = d.delta;
    copy_norms(d, snap, st);
    const auto src = d.linears();
    auto dst = snap.linears();
    for (size_t i = 0; i < src.size(); ++i) {
        if (!src[i]->blr) {
            dst[i]->blr.reset();
            continue;
        }
        const DBlr& b = *src[i]->blr;
        DBlr& s = same_shape(b, dst[i]->blr);
        for (size_t k = 0; k < b.paths.size(); ++k) {
            const DBlrPath& p = b.paths[k];
            DBlrPath& q = s.paths[k];
            copy_scales(p, q, st);
            if (p.packed()) {
                copy_bits(p.su_bits, q.su_bits, st);
                copy_bits(p.sv_bits, q.sv_bits, st);
            } else {
                CORTIQ_ASSERT(p.su.size() == b.m * b.rp && p.sv.size() == b.n * b.rp,
                              "snapshot of a {} × {} layer of rank {} with {} and {} signs", b.m,
                              b.n, b.rp, p.su.size(), p.sv.size());
                pack_into(g, p.su, q.su_bits);
                pack_into(g, p.sv, q.sv_bits);
            }
        }
    }
}

void restore_from(const Gpu& g, const DBlockParams& snap, DBlockParams& d) {
    const cudaStream_t st = g.stream();
    copy_norms(snap, d, st);
    const auto src = snap.linears();
    auto dst = d.linears();
    for (size_t i = 0; i < src.size(); ++i) {
        if (!dst[i]->blr) continue;
        CORTIQ_ASSERT(src[i]->blr && src[i]->blr->paths.size() == dst[i]->blr->paths.size(),
                      "restoring linear {} from a snapshot of another block", i);
        const DBlr& s = *src[i]->blr;
        DBlr& b = *dst[i]->blr;
        for (size_t k = 0; k < b.paths.size(); ++k) {
            const DBlrPath& q = s.paths[k];
            DBlrPath& p = b.paths[k];
            copy_scales(q, p, st);
            if (p.packed()) {
                copy_bits(q.su_bits, p.su_bits, st);
                copy_bits(q.sv_bits, p.sv_bits, st);
            } else {
                expand_into(g, q.su_bits, b.m, b, p.su);
                expand_into(g, q.sv_bits, b.n, b, p.sv);
            }
        }
    }
}

int64_t sign_changes(const Gpu& g, const DBlockParams& a, const DBlockParams& b) {
    DeviceBuffer<unsigned long long> count(1, g.stream());
    CUDA_CHECK(cudaMemsetAsync(count.get(), 0, sizeof(unsigned long long), g.stream()));
    const auto la = a.linears(), lb = b.linears();
    const auto add = [&](const DeviceBuffer<uint32_t>& x, const DeviceBuffer<uint32_t>& y) {
        CORTIQ_ASSERT(x.size() == y.size(), "sign changes between {} and {} words", x.size(),
                      y.size());
        if (x.size() == 0) return;
        const int64_t blocks = std::min<int64_t>((x.size() + kThreads - 1) / kThreads, 4096);
        differing_bits_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, g.stream()>>>(
            x.get(), y.get(), x.size(), count.get());
        CUDA_LAUNCH_CHECK();
    };
    for (size_t i = 0; i < la.size(); ++i) {
        if (!la[i]->blr) continue;
        CORTIQ_ASSERT(lb[i]->blr && lb[i]->blr->paths.size() == la[i]->blr->paths.size(),
                      "sign changes between blocks of different layers (linear {})", i);
        for (size_t k = 0; k < la[i]->blr->paths.size(); ++k) {
            const DBlrPath &p = la[i]->blr->paths[k], &q = lb[i]->blr->paths[k];
            CORTIQ_ASSERT(p.packed() && q.packed(), "sign changes count snapshots' bits");
            add(p.su_bits, q.su_bits);
            add(p.sv_bits, q.sv_bits);
        }
    }
    unsigned long long n = 0;
    CUDA_CHECK(cudaMemcpyAsync(&n, count.get(), sizeof n, cudaMemcpyDeviceToHost, g.stream()));
    g.sync();
    return static_cast<int64_t>(n);
}

}  // namespace cortiq::tune::cuda
