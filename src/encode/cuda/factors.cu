// The BLR factors on the device (DeviceFactors): scaled sign matrices, the per-path H·right and
// W H·right caches, and the host ↔ device hooks used by pack and the tests.
#include "core/parallel.hpp"
#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

TensorContext::TensorContext(const TensorData& d_, const InputContext& ic_, Gpu& gpu_,
                             Profile* prof_, Tuning tuning_)
    : d(d_), input_ctx(ic_), gpu(gpu_), prof(prof_), tuning(tuning_) {}

DeviceFactors DeviceFactors::clone(cudaStream_t st) const {
    DeviceFactors o;
    o.m = m;
    o.n = n;
    o.r = r;
    for (const Path& p : paths) {
        Path q;
        q.h = p.h.clone(st);
        q.l = p.l.clone(st);
        q.g = p.g.clone(st);
        q.su = p.su.clone(st);
        q.sv = p.sv.clone(st);
        if (p.h_right) q.h_right = p.h_right->clone(st);
        if (p.wh_right) q.wh_right = p.wh_right->clone(st);
        o.paths.push_back(std::move(q));
    }
    return o;
}

void DeviceFactors::rebind(cudaStream_t st) {
    for (Path& p : paths) {
        p.h.rebind(st);
        p.l.rebind(st);
        p.g.rebind(st);
        p.su.rebind(st);
        p.sv.rebind(st);
        if (p.h_right) p.h_right->rebind(st);
        if (p.wh_right) p.wh_right->rebind(st);
    }
}

DMat DeviceFactors::left(cudaStream_t st, size_t p) const {
    DMat o(m, r, st);
    scale_rc(st, o.data(), paths[p].su.data(), paths[p].h.get(), paths[p].l.get(), m, r);
    return o;
}

DMat DeviceFactors::left_h(cudaStream_t st, size_t p) const {
    DMat o(m, r, st);
    scale_rc(st, o.data(), paths[p].su.data(), paths[p].h.get(), nullptr, m, r);
    return o;
}

DMat DeviceFactors::left_l(cudaStream_t st, size_t p) const {
    DMat o(m, r, st);
    scale_rc(st, o.data(), paths[p].su.data(), nullptr, paths[p].l.get(), m, r);
    return o;
}

DMat DeviceFactors::right(cudaStream_t st, size_t p) const {
    DMat o(n, r, st);
    scale_rc(st, o.data(), paths[p].sv.data(), paths[p].g.get(), nullptr, n, r);
    return o;
}

const DMat& DeviceFactors::h_right(const TensorContext& c, size_t p) const {
    const Path& q = paths[p];
    if (!q.h_right)
        q.h_right = mm(c.gpu, c.input_ctx.h, false, right(c.stream(), p), false, c.big(n));
    return *q.h_right;
}

const DMat& DeviceFactors::wh_right(const TensorContext& c, size_t p) const {
    const Path& q = paths[p];
    if (!q.wh_right) q.wh_right = mm(c.gpu, c.d.wh, false, right(c.stream(), p), false, c.big(n));
    return *q.wh_right;
}

DMat upload(const MatD& a, cudaStream_t st) {
    std::vector<float> f(static_cast<size_t>(a.size()));
    parallel_for(
        0, a.rows(),
        [&](int64_t i) {
            for (int64_t j = 0; j < a.cols(); ++j)
                f[static_cast<size_t>(i * a.cols() + j)] = static_cast<float>(a(i, j));
        },
        64);
    DMat d(a.rows(), a.cols(), st);
    if (!f.empty()) {
        CUDA_CHECK(cudaMemcpyAsync(d.data(), f.data(), f.size() * sizeof(float),
                                   cudaMemcpyHostToDevice, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
    }
    return d;
}

MatD download(const DMat& a, cudaStream_t st) {
    const auto f = download_f(a.data(), a.size(), st);
    MatD out(a.rows, a.cols);
    for (size_t k = 0; k < f.size(); ++k) out.data()[k] = f[k];
    return out;
}

DeviceFactors to_device(const blr::Factors& factors, cudaStream_t st) {
    DeviceFactors o;
    o.m = factors.m;
    o.n = factors.n;
    o.r = factors.r;
    for (const blr::Path& p : factors.paths) {
        Path q;
        q.h = upload(p.h, st);
        q.l = upload(p.l, st);
        q.g = upload(p.g, st);
        q.su = upload(p.su, st);
        q.sv = upload(p.sv, st);
        o.paths.push_back(std::move(q));
    }
    return o;
}

blr::Factors to_host(const DeviceFactors& factors, cudaStream_t st) {
    blr::Factors o;
    o.m = factors.m;
    o.n = factors.n;
    o.r = factors.r;
    for (const Path& p : factors.paths) {
        blr::Path q;
        q.h = download(p.h, st);
        q.l = download(p.l, st);
        q.g = download(p.g, st);
        q.su = download(p.su, st);
        q.sv = download(p.sv, st);
        o.paths.push_back(std::move(q));
    }
    return o;
}

}  // namespace cortiq::encode::cuda
