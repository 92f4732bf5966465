// The BLR model on the device: scaled sign matrices, the per-path H·gs and
// W H·gs caches, and the host ↔ device hooks used by pack and the tests.
#include "core/parallel.hpp"
#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

StageTimer::StageTimer(const Gpu& gpu, Profile* prof, const char* stage)
    : gpu_(gpu), prof_(prof), stage_(stage), t0_(std::chrono::steady_clock::now()) {}

StageTimer::~StageTimer() {
    if (!prof_) return;
    gpu_.sync_noexcept();
    prof_->add(stage_, seconds_since(t0_));
}

TensorContext::TensorContext(const TensorData& d_, const InputContext& ic_, Gpu& gpu_,
                             Profile* prof_, Tuning tuning_)
    : d(d_), ic(ic_), gpu(gpu_), prof(prof_), tuning(tuning_) {}

Model Model::clone(cudaStream_t st) const {
    Model o;
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
        if (p.hg) q.hg = p.hg->clone(st);
        if (p.whg) q.whg = p.whg->clone(st);
        o.paths.push_back(std::move(q));
    }
    return o;
}

void Model::rebind(cudaStream_t st) {
    for (Path& p : paths) {
        p.h.rebind(st);
        p.l.rebind(st);
        p.g.rebind(st);
        p.su.rebind(st);
        p.sv.rebind(st);
        if (p.hg) p.hg->rebind(st);
        if (p.whg) p.whg->rebind(st);
    }
}

DMat Model::hsl(cudaStream_t st, size_t p) const {
    DMat o(m, r, st);
    scale_rc(st, o.data(), paths[p].su.data(), paths[p].h.get(), paths[p].l.get(), m, r);
    return o;
}

DMat Model::hs(cudaStream_t st, size_t p) const {
    DMat o(m, r, st);
    scale_rc(st, o.data(), paths[p].su.data(), paths[p].h.get(), nullptr, m, r);
    return o;
}

DMat Model::sl(cudaStream_t st, size_t p) const {
    DMat o(m, r, st);
    scale_rc(st, o.data(), paths[p].su.data(), nullptr, paths[p].l.get(), m, r);
    return o;
}

DMat Model::gs(cudaStream_t st, size_t p) const {
    DMat o(n, r, st);
    scale_rc(st, o.data(), paths[p].sv.data(), paths[p].g.get(), nullptr, n, r);
    return o;
}

const DMat& Model::hg(const TensorContext& c, size_t p) const {
    const Path& q = paths[p];
    if (!q.hg) q.hg = mm(c.gpu, c.ic.h, false, gs(c.stream(), p), false, c.big(n));
    return *q.hg;
}

const DMat& Model::whg(const TensorContext& c, size_t p) const {
    const Path& q = paths[p];
    if (!q.whg) q.whg = mm(c.gpu, c.d.wh, false, gs(c.stream(), p), false, c.big(n));
    return *q.whg;
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

Model to_device(const blr::Model& md, cudaStream_t st) {
    Model o;
    o.m = md.m;
    o.n = md.n;
    o.r = md.r;
    for (const blr::Path& p : md.paths) {
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

blr::Model to_host(const Model& md, cudaStream_t st) {
    blr::Model o;
    o.m = md.m;
    o.n = md.n;
    o.r = md.r;
    for (const Path& p : md.paths) {
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
