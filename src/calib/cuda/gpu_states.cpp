// Sequential calibration on the device (calib/gpu_states.hpp): the hidden
// states of the calibration windows stay on the GPU, a block of the model runs
// on them in batches of about GpuModel::batch_rows() rows, and the Gram of the
// requested input accumulates in float64 (calib/cuda/gram.hpp). The CPU twin
// is calib/sequential.cpp's loop over model::Model::block with a hook.
#include "calib/gpu_states.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <optional>

#include "calib/cuda/gram.hpp"
#include "core/cuda/device.hpp"
#include "core/error.hpp"
#include "model/gpu_model.hpp"

namespace cortiq::calib {

using cortiq::cuda::download_f;
using cortiq::cuda::DVec;

// One model on the device and the hidden states of its two windows sets
// (fit and held out, each of one length), windows × T × hidden.
struct GpuStates::Impl {
    struct Set {
        int64_t windows = 0, T = 0;
        DVec x;
        DVec y;  // block_outputs_on_device's
    };
    model::GpuModel model;
    const model::Model* host;  // where each layer is read from as it goes to the device
    std::array<Set, 2> sets;

    // One decoder layer on the device at a time (GpuModel::load_layer): the
    // calibration runs the layers in order, each on every window before the
    // next, so a model's device memory does not grow with its depth.
    explicit Impl(const model::Model& m)
        : model(m, model::GpuOptions{.layers_on_demand = true}), host(&m) {}
    // Layer `layer` on the device, read from the host model (as it is now:
    // the layers compressed so far formed dense) when it is not there.
    void ensure_layer(int64_t layer) {
        if (model.layer_loaded(layer)) return;
        const auto t0 = std::chrono::steady_clock::now();
        model.load_layer(layer, *host);  // returns once the upload is complete
        load_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    double load_seconds = 0;
    cudaStream_t stream() { return model.gpu().stream(); }
    Set& set(int s) {
        CORTIQ_CHECK(s == 0 || s == 1, "calibration set {} (0: fit, 1: held out)", s);
        return sets[static_cast<size_t>(s)];
    }
    // Windows per batch: about batch_rows() rows, at least one window.
    int64_t windows_per_batch(int64_t T) const {
        return std::max<int64_t>(1, model.batch_rows() / T);
    }
    void load(int s, const std::vector<std::vector<int32_t>>& windows);

    // The outputs of block `layer` on the set's states, batch by batch, into
    // `out` (windows × T × hidden on the device) or, when null, the model's
    // work rows; each_batch(outputs, first window, windows) after each batch.
    // The states stay as they are.
    template <class F>
    void run_block_copy(Set& cs, int64_t layer, float* out, F&& each_batch) {
        const io::ModelConfig& c = model.config();
        CORTIQ_CHECK(cs.windows > 0, "calibration set is not loaded");
        CORTIQ_CHECK(layer >= 0 && layer < c.num_layers, "layer {} of {}", layer, c.num_layers);
        const int64_t H = c.hidden_size, T = cs.T, each = T * H, per = windows_per_batch(T);
        ensure_layer(layer);
        for (int64_t w0 = 0; w0 < cs.windows; w0 += per) {
            const int64_t nw = std::min(per, cs.windows - w0), rows = nw * T;
            // The block adds into its input: run it on a copy.
            float* work = out ? out + w0 * each : model.work_rows(rows);
            CUDA_CHECK(cudaMemcpyAsync(work, cs.x.get() + w0 * each,
                                       static_cast<size_t>(rows * H) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, stream()));
            model.run_block(layer, nw, T, work);
            each_batch(work, w0, nw);
        }
    }
};

namespace {

// The states behind a pointer (a moved-from object's is empty).
template <class P>
auto& live(const P& impl) {
    CORTIQ_CHECK(impl, "the calibration states on the GPU were released");
    return *impl;
}

// Width of a linear-layer input (a LinearInputHook name, or "lm_head").
int64_t input_width(const io::ModelConfig& c, std::string_view input) {
    const int64_t width = input == "lm_head" || input == "self_attn.q_proj" ||
                                  input == "mlp.gate_proj" || input == "linear_attn.in_proj_qkv"
                              ? c.hidden_size
                          : input == "self_attn.o_proj"     ? c.q_dim()
                          : input == "mlp.down_proj"        ? c.intermediate_size
                          : input == "linear_attn.out_proj" ? c.delta.value_dim()
                                                            : -1;
    CORTIQ_CHECK(width > 0, "no linear-layer input named '{}'", input);
    return width;
}

}  // namespace

void GpuStates::Impl::load(int s, const std::vector<std::vector<int32_t>>& windows) {
    Set& cs = set(s);
    CORTIQ_CHECK(!windows.empty() && !windows[0].empty(), "calibration set {} has no tokens", s);
    const int64_t T = static_cast<int64_t>(windows[0].size()), H = model.config().hidden_size;
    for (const auto& w : windows)
        CORTIQ_CHECK(static_cast<int64_t>(w.size()) == T,
                     "calibration windows of {} and {} tokens: one length is needed", T, w.size());
    cs = Set{};
    cs.windows = static_cast<int64_t>(windows.size());
    cs.T = T;
    cs.x = DVec(cs.windows * T * H, stream());
    const int64_t per = windows_per_batch(T);
    std::vector<int32_t> ids;
    for (int64_t w0 = 0; w0 < cs.windows; w0 += per) {
        const int64_t nw = std::min(per, cs.windows - w0);
        ids.clear();
        for (int64_t w = w0; w < w0 + nw; ++w)
            ids.insert(ids.end(), windows[static_cast<size_t>(w)].begin(),
                       windows[static_cast<size_t>(w)].end());
        model.embed_into(ids, cs.x.get() + w0 * T * H);  // checks the ids
    }
    model.gpu().sync();  // `ids` is reused by the next call
}

GpuStates::GpuStates(const model::Model& m, const CalibSet& cs) : impl_(std::make_unique<Impl>(m)) {
    impl_->load(0, cs.fit);
    if (!cs.sel.empty()) impl_->load(1, cs.sel);  // else calls on set 1 say it is not loaded
}

GpuStates::~GpuStates() = default;

double GpuStates::load_seconds() const {
    return impl_ ? impl_->load_seconds : 0.0;
}

MatD GpuStates::gram(int set, int64_t layer, std::string_view input) {
    Impl& g = live(impl_);
    Impl::Set& cs = g.set(set);
    const io::ModelConfig& c = g.model.config();
    CORTIQ_CHECK(cs.windows > 0, "calibration set {} is not loaded", set);
    const bool head = input == "lm_head";
    CORTIQ_CHECK(head || (layer >= 0 && layer < c.num_layers), "layer {} of {}", layer,
                 c.num_layers);
    const int64_t H = c.hidden_size, T = cs.T, width = input_width(c, input);
    const cudaStream_t st = g.stream();
    const cublasHandle_t blas = g.model.gpu().blas();
    cuda::DeviceGram gram(width, st);
    if (!head) g.ensure_layer(layer);
    const model::GpuModel::DeviceInputHook hook = [&](std::string_view in, const float* x,
                                                      int64_t rows, int64_t cols) {
        if (in != input) return;
        CORTIQ_ASSERT(cols == width, "{} is {} wide, expected {}", in, cols, width);
        gram.add(blas, x, rows);
    };
    const int64_t per = g.windows_per_batch(T);
    for (int64_t w0 = 0; w0 < cs.windows; w0 += per) {
        const int64_t nw = std::min(per, cs.windows - w0), rows = nw * T;
        const float* x = cs.x.get() + w0 * T * H;
        if (head) {
            gram.add(blas, g.model.final_norm_rows(x, rows), rows);
            continue;
        }
        // The block adds into its input: run it on a copy.
        float* work = g.model.work_rows(rows);
        CUDA_CHECK(cudaMemcpyAsync(work, x, static_cast<size_t>(rows * H) * sizeof(float),
                                   cudaMemcpyDeviceToDevice, st));
        g.model.run_block(layer, nw, T, work, &hook, input);
    }
    return gram.mean();
}

MatD GpuStates::cross_gram(int set, int64_t layer, std::string_view input, GpuStates& original,
                           MatD* gram_out) {
    Impl& g = live(impl_);
    Impl& o = live(original.impl_);
    Impl::Set& cs = g.set(set);
    Impl::Set& os = o.set(set);
    const io::ModelConfig& c = g.model.config();
    CORTIQ_CHECK(cs.windows > 0 && os.windows == cs.windows && os.T == cs.T,
                 "calibration set {}: {} windows here, {} in the original model", set, cs.windows,
                 os.windows);
    CORTIQ_CHECK(layer >= 0 && layer < c.num_layers, "layer {} of {}", layer, c.num_layers);
    CORTIQ_CHECK(input != "lm_head", "no cross Gram for the head's input");
    const int64_t H = c.hidden_size, T = cs.T, width = input_width(c, input);
    const int64_t per = g.windows_per_batch(T);
    const cudaStream_t st = g.stream();
    g.ensure_layer(layer);
    o.ensure_layer(layer);
    cuda::DeviceCrossGram cross(width, width, st);
    std::optional<cuda::DeviceGram> gram;
    if (gram_out) gram.emplace(width, st);
    DVec xo(per * T * width, st);  // the original model's input, one batch
    g.model.gpu().sync();  // xo and the cross Gram exist before the other model's stream writes xo
    for (int64_t w0 = 0; w0 < cs.windows; w0 += per) {
        const int64_t nw = std::min(per, cs.windows - w0), rows = nw * T;
        const model::GpuModel::DeviceInputHook keep = [&](std::string_view in, const float* x,
                                                          int64_t r, int64_t cols) {
            if (in != input) return;
            CORTIQ_ASSERT(r == rows && cols == width, "{}: {} x {}", in, r, cols);
            CUDA_CHECK(cudaMemcpyAsync(xo.get(), x, static_cast<size_t>(r * cols) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, o.stream()));
        };
        float* o_work = o.model.work_rows(rows);
        CUDA_CHECK(cudaMemcpyAsync(o_work, os.x.get() + w0 * T * H,
                                   static_cast<size_t>(rows * H) * sizeof(float),
                                   cudaMemcpyDeviceToDevice, o.stream()));
        o.model.run_block(layer, nw, T, o_work, &keep, input);
        o.model.gpu().sync();  // xo is read on this model's stream
        const model::GpuModel::DeviceInputHook pair = [&](std::string_view in, const float* x,
                                                          int64_t r, int64_t cols) {
            if (in != input) return;
            CORTIQ_ASSERT(r == rows && cols == width, "{}: {} x {}", in, r, cols);
            cross.add(g.model.gpu().blas(), xo.get(), x, r);
            if (gram) gram->add(g.model.gpu().blas(), x, r);  // as gram() adds it
        };
        float* work = g.model.work_rows(rows);
        CUDA_CHECK(cudaMemcpyAsync(work, cs.x.get() + w0 * T * H,
                                   static_cast<size_t>(rows * H) * sizeof(float),
                                   cudaMemcpyDeviceToDevice, st));
        g.model.run_block(layer, nw, T, work, &pair, input);
        g.model.gpu().sync();  // the product has read xo before the next batch overwrites it
    }
    if (gram_out) *gram_out = gram->mean();
    return cross.mean();
}

void GpuStates::advance(int set, int64_t layer) {
    Impl& g = live(impl_);
    Impl::Set& cs = g.set(set);
    const io::ModelConfig& c = g.model.config();
    CORTIQ_CHECK(cs.windows > 0, "calibration set {} is not loaded", set);
    CORTIQ_CHECK(layer >= 0 && layer < c.num_layers, "layer {} of {}", layer, c.num_layers);
    const int64_t T = cs.T, per = g.windows_per_batch(T);
    g.ensure_layer(layer);
    for (int64_t w0 = 0; w0 < cs.windows; w0 += per) {
        const int64_t nw = std::min(per, cs.windows - w0);
        g.model.run_block(layer, nw, T, cs.x.get() + w0 * T * c.hidden_size);
    }
    g.model.gpu().sync();
}

std::vector<MatF> GpuStates::hidden(int set) {
    Impl& g = live(impl_);
    Impl::Set& cs = g.set(set);
    const int64_t H = g.model.config().hidden_size, each = cs.T * H;
    const std::vector<float> all = download_f(cs.x.get(), cs.windows * each, g.stream());
    std::vector<MatF> out;
    for (int64_t w = 0; w < cs.windows; ++w)
        out.emplace_back(cs.T, H,
                         std::vector<float>(all.begin() + w * each, all.begin() + (w + 1) * each));
    return out;
}

std::vector<MatF> GpuStates::block_outputs(int set, int64_t layer) {
    Impl& g = live(impl_);
    Impl::Set& cs = g.set(set);
    const int64_t H = g.model.config().hidden_size, T = cs.T, each = T * H;
    std::vector<MatF> out;
    out.reserve(static_cast<size_t>(cs.windows));
    g.run_block_copy(cs, layer, nullptr, [&](const float* work, int64_t, int64_t nw) {
        const std::vector<float> batch = download_f(work, nw * each, g.stream());  // synchronises
        for (int64_t w = 0; w < nw; ++w)
            out.emplace_back(
                T, H, std::vector<float>(batch.begin() + w * each, batch.begin() + (w + 1) * each));
    });
    return out;
}

GpuStates::DeviceSet GpuStates::hidden_on_device(int set) {
    Impl& g = live(impl_);
    Impl::Set& cs = g.set(set);
    g.model.gpu().sync();
    return {cs.x.get(), cs.windows, cs.T, g.model.config().hidden_size};
}

GpuStates::DeviceSet GpuStates::block_outputs_on_device(int set, int64_t layer) {
    Impl& g = live(impl_);
    Impl::Set& cs = g.set(set);
    const int64_t H = g.model.config().hidden_size;
    if (cs.y.size() != cs.x.size()) cs.y = DVec(cs.x.size(), g.stream());
    g.run_block_copy(cs, layer, cs.y.get(), [](const float*, int64_t, int64_t) {});
    g.model.gpu().sync();
    return {cs.y.get(), cs.windows, cs.T, H};
}

void GpuStates::free_block_outputs() {
    Impl& g = live(impl_);
    for (Impl::Set& cs : g.sets) cs.y = DVec();
}

void GpuStates::set_linear(int64_t layer, std::string_view name, const model::LinearWeights& w) {
    Impl& g = live(impl_);
    g.ensure_layer(layer);  // the host's layer as it is, then this weight in it
    g.model.set_linear(layer, name, w);
}

const float* GpuStates::final_hidden(int set, int64_t window) {
    Impl& g = live(impl_);
    Impl::Set& cs = g.set(set);
    CORTIQ_CHECK(window >= 0 && window < cs.windows, "window {} of {} in set {}", window,
                 cs.windows, set);
    const int64_t H = g.model.config().hidden_size;
    const float* n = g.model.final_norm_rows(cs.x.get() + window * cs.T * H, cs.T);
    g.model.gpu().sync();
    return n;
}

const float* GpuStates::head_logits(const float* normed, int64_t rows) {
    return live(impl_).model.head_on_device(normed, rows);
}

}  // namespace cortiq::calib
