// Sequential calibration on the device (GpuModel::calib_*): the hidden states
// of the calibration windows stay on the GPU, a block runs on them in batches
// of about kBatchRows rows, and the Gram of the requested input accumulates in
// float64 (model/cuda/gram.hpp). The CPU twin is quantize.cpp's loop over
// model::Model::block with a LinearInputHook.
#include <algorithm>

#include "model/cuda/gpu_model_impl.hpp"
#include "model/cuda/gram.hpp"

namespace cortiq::model {

namespace {

GpuModel::Impl::CalibSet& calib_set(GpuModel::Impl& g, int set) {
    CORTIQ_CHECK(set == 0 || set == 1, "calibration set {} (0: fit, 1: held out)", set);
    return g.calib[static_cast<size_t>(set)];
}

// Windows per batch: about kBatchRows rows, at least one window.
int64_t windows_per_batch(int64_t T) {
    return std::max<int64_t>(1, kBatchRows / T);
}

cuda::DeviceLinear& linear_named(cuda::DeviceLayer& l, std::string_view name) {
    if (name == "self_attn.q_proj") return l.q;
    if (name == "self_attn.k_proj") return l.k;
    if (name == "self_attn.v_proj") return l.v;
    if (name == "self_attn.o_proj") return l.o;
    if (name == "mlp.gate_proj") return l.gate;
    if (name == "mlp.up_proj") return l.up;
    if (name == "mlp.down_proj") return l.down;
    CORTIQ_FAIL("no linear layer named '{}' in a decoder block", name);
}

// Width of a linear-layer input (a LinearInputHook name, or "lm_head").
int64_t input_width(const io::ModelConfig& c, std::string_view input) {
    const int64_t width =
        input == "lm_head" || input == "self_attn.q_proj" || input == "mlp.gate_proj"
            ? c.hidden_size
        : input == "self_attn.o_proj" ? c.q_dim()
        : input == "mlp.down_proj"    ? c.intermediate_size
                                      : -1;
    CORTIQ_CHECK(width > 0, "no linear-layer input named '{}'", input);
    return width;
}

}  // namespace

void GpuModel::calib_load(int set, const std::vector<std::vector<int32_t>>& windows) {
    Impl& g = *impl_;
    Impl::CalibSet& cs = calib_set(g, set);
    CORTIQ_CHECK(!windows.empty() && !windows[0].empty(), "calibration set {} has no tokens", set);
    const int64_t T = static_cast<int64_t>(windows[0].size()), H = g.cfg.hidden_size;
    for (const auto& w : windows)
        CORTIQ_CHECK(static_cast<int64_t>(w.size()) == T,
                     "calibration windows of {} and {} tokens: one length is needed", T, w.size());
    cs = Impl::CalibSet{};
    cs.windows = static_cast<int64_t>(windows.size());
    cs.T = T;
    cs.x = DVec(cs.windows * T * H, g.stream());
    const int64_t per = windows_per_batch(T);
    std::vector<int32_t> ids;
    for (int64_t w0 = 0; w0 < cs.windows; w0 += per) {
        const int64_t nw = std::min(per, cs.windows - w0);
        ids.clear();
        for (int64_t w = w0; w < w0 + nw; ++w)
            ids.insert(ids.end(), windows[static_cast<size_t>(w)].begin(),
                       windows[static_cast<size_t>(w)].end());
        g.load_tokens(ids);  // checks the ids, sizes the workspace
        cuda::embed(g.ws.tokens.get(), g.w.embed.get(), nw * T, H, cs.x.get() + w0 * T * H,
                    g.stream());
    }
    g.gpu.sync();  // `ids` is reused by the next call
}

MatD GpuModel::calib_gram(int set, int64_t layer, std::string_view input) {
    Impl& g = *impl_;
    Impl::CalibSet& cs = calib_set(g, set);
    const io::ModelConfig& c = g.cfg;
    CORTIQ_CHECK(cs.windows > 0, "calibration set {} is not loaded", set);
    const bool head = input == "lm_head";
    CORTIQ_CHECK(head || (layer >= 0 && layer < c.num_layers), "layer {} of {}", layer,
                 c.num_layers);
    const int64_t H = c.hidden_size, T = cs.T, width = input_width(c, input);
    const cudaStream_t st = g.stream();
    cuda::DeviceGram gram(width, st);
    const Impl::DeviceHook hook = [&](std::string_view in, const float* x, int64_t rows,
                                      int64_t cols) {
        if (in != input) return;
        CORTIQ_ASSERT(cols == width, "{} is {} wide, expected {}", in, cols, width);
        gram.add(g.gpu.blas(), x, rows);
    };
    const int64_t per = windows_per_batch(T);
    g.ensure_rope(T);
    for (int64_t w0 = 0; w0 < cs.windows; w0 += per) {
        const int64_t nw = std::min(per, cs.windows - w0), rows = nw * T;
        g.ensure_work(rows);
        const float* x = cs.x.get() + w0 * T * H;
        if (head) {
            cuda::rmsnorm(x, rows, H, g.w.final_norm.get(), static_cast<float>(c.rms_norm_eps),
                          g.ws.n.get(), st);
            gram.add(g.gpu.blas(), g.ws.n.get(), rows);
            continue;
        }
        // The block adds into its input: run it on a copy.
        CUDA_CHECK(cudaMemcpyAsync(g.ws.x.get(), x, static_cast<size_t>(rows * H) * sizeof(float),
                                   cudaMemcpyDeviceToDevice, st));
        g.block(static_cast<size_t>(layer), nw, T, 0, false, g.ws.x.get(), &hook, input);
    }
    return gram.mean();
}

MatD GpuModel::calib_cross_gram(int set, int64_t layer, std::string_view input,
                                GpuModel& original) {
    Impl& g = *impl_;
    Impl& o = *original.impl_;
    Impl::CalibSet& cs = calib_set(g, set);
    Impl::CalibSet& os = calib_set(o, set);
    const io::ModelConfig& c = g.cfg;
    CORTIQ_CHECK(cs.windows > 0 && os.windows == cs.windows && os.T == cs.T,
                 "calibration set {}: {} windows here, {} in the original model", set, cs.windows,
                 os.windows);
    CORTIQ_CHECK(layer >= 0 && layer < c.num_layers, "layer {} of {}", layer, c.num_layers);
    CORTIQ_CHECK(input != "lm_head", "no cross Gram for the head's input");
    const int64_t H = c.hidden_size, T = cs.T, width = input_width(c, input);
    const int64_t per = windows_per_batch(T);
    const cudaStream_t st = g.stream();
    cuda::DeviceCrossGram cross(width, width, st);
    DVec xo(per * T * width, st);  // the original model's input, one batch
    g.ensure_rope(T);
    o.ensure_rope(T);
    g.gpu.sync();  // xo and the cross Gram exist before the other model's stream writes xo
    for (int64_t w0 = 0; w0 < cs.windows; w0 += per) {
        const int64_t nw = std::min(per, cs.windows - w0), rows = nw * T;
        const Impl::DeviceHook keep = [&](std::string_view in, const float* x, int64_t r,
                                          int64_t cols) {
            if (in != input) return;
            CORTIQ_ASSERT(r == rows && cols == width, "{}: {} x {}", in, r, cols);
            CUDA_CHECK(cudaMemcpyAsync(xo.get(), x, static_cast<size_t>(r * cols) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, o.stream()));
        };
        o.ensure_work(rows);
        CUDA_CHECK(cudaMemcpyAsync(o.ws.x.get(), os.x.get() + w0 * T * H,
                                   static_cast<size_t>(rows * H) * sizeof(float),
                                   cudaMemcpyDeviceToDevice, o.stream()));
        o.block(static_cast<size_t>(layer), nw, T, 0, false, o.ws.x.get(), &keep, input);
        o.gpu.sync();  // xo is read on this model's stream
        const Impl::DeviceHook pair = [&](std::string_view in, const float* x, int64_t r,
                                          int64_t cols) {
            if (in != input) return;
            CORTIQ_ASSERT(r == rows && cols == width, "{}: {} x {}", in, r, cols);
            cross.add(g.gpu.blas(), xo.get(), x, r);
        };
        g.ensure_work(rows);
        CUDA_CHECK(cudaMemcpyAsync(g.ws.x.get(), cs.x.get() + w0 * T * H,
                                   static_cast<size_t>(rows * H) * sizeof(float),
                                   cudaMemcpyDeviceToDevice, st));
        g.block(static_cast<size_t>(layer), nw, T, 0, false, g.ws.x.get(), &pair, input);
        g.gpu.sync();  // the product has read xo before the next batch overwrites it
    }
    return cross.mean();
}

void GpuModel::calib_advance(int set, int64_t layer) {
    Impl& g = *impl_;
    Impl::CalibSet& cs = calib_set(g, set);
    CORTIQ_CHECK(cs.windows > 0, "calibration set {} is not loaded", set);
    CORTIQ_CHECK(layer >= 0 && layer < g.cfg.num_layers, "layer {} of {}", layer, g.cfg.num_layers);
    const int64_t T = cs.T, per = windows_per_batch(T);
    g.ensure_rope(T);
    for (int64_t w0 = 0; w0 < cs.windows; w0 += per) {
        const int64_t nw = std::min(per, cs.windows - w0);
        g.ensure_work(nw * T);
        g.block(static_cast<size_t>(layer), nw, T, 0, false,
                cs.x.get() + w0 * T * g.cfg.hidden_size);
    }
    g.gpu.sync();
}

void GpuModel::set_linear(int64_t layer, std::string_view name, const LinearWeights& w) {
    Impl& g = *impl_;
    CORTIQ_CHECK(layer >= 0 && layer < g.cfg.num_layers, "layer {} of {}", layer, g.cfg.num_layers);
    cuda::set_weight(linear_named(g.w.layers[static_cast<size_t>(layer)], name), w.dense(),
                     g.stream());
}

}  // namespace cortiq::model
