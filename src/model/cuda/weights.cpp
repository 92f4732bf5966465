#include "model/cuda/weights.hpp"

#include <algorithm>

#include "core/cuda/gemm_tf32.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "model/blr_linear.hpp"
#include "model/cuda/kernels.hpp"
#include "model/cuda/knob.hpp"
#include "model/llama.hpp"

namespace cortiq::model::cuda {

namespace {

DVec upload(const std::vector<float>& v, cudaStream_t stream, int64_t& bytes) {
    bytes += static_cast<int64_t>(v.size() * sizeof(float));
    return cortiq::cuda::upload_f(v, stream);
}

cortiq::cuda::DeviceBuffer<__half> upload_half(const MatF& w, cudaStream_t stream, int64_t& bytes) {
    std::vector<uint16_t> h(static_cast<size_t>(w.size()));
    for (size_t i = 0; i < h.size(); ++i) h[i] = float_to_half(w.data()[i]);
    cortiq::cuda::DeviceBuffer<__half> d(w.size(), stream);
    CUDA_CHECK(cudaMemcpyAsync(d.get(), h.data(), h.size() * sizeof(uint16_t),
                               cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));  // h is freed on return
    bytes += static_cast<int64_t>(h.size() * sizeof(uint16_t));
    return d;
}

// Where upload_linear puts a layer: its format and the scratch it shares.
struct Target {
    WeightFormat format;
    PackedScratch* scratch;
    HalfScratch* half_scratch;
    cublasHandle_t blas;
    bool dense_blr = false;  // native: a compressed layer formed dense (set_weight_blr)
};

// Ŵᵀ (n × m, row-major: Ŵ column-major) of a packed layer in fp16, formed on
// the device by the packed kernels themselves: rows j0.. of the identity
// through the layer give rows j0.. of Ŵᵀ (identity rows are exact in the
// kernels' fp16 inputs), a chunk of rows at a time so that no n × n identity
// is ever held.
cortiq::cuda::DeviceBuffer<__half> dequant_to_f16(const DevicePacked& p, int64_t m, int64_t n,
                                                  const Target& to, cudaStream_t stream) {
    constexpr int64_t kChunk = 1024;
    cortiq::cuda::DeviceBuffer<__half> out(n * m, stream);
    const int64_t rows = std::min(kChunk, n);
    DVec eye(rows * n, stream), wt(rows * m, stream);
    std::vector<float> host(static_cast<size_t>(rows * n));
    for (int64_t j0 = 0; j0 < n; j0 += rows) {
        const int64_t c = std::min(rows, n - j0);
        std::fill(host.begin(), host.end(), 0.0f);
        for (int64_t i = 0; i < c; ++i) host[static_cast<size_t>(i * n + j0 + i)] = 1.0f;
        CUDA_CHECK(cudaMemcpyAsync(eye.get(), host.data(), static_cast<size_t>(c * n) * 4,
                                   cudaMemcpyHostToDevice, stream));
        packed_linear(to.blas, stream, p, *to.scratch, eye.get(), c, wt.get(), 0.0f, nullptr);
        to_f16(wt.get(), c * m, out.get() + j0 * m, stream);
        CUDA_CHECK(cudaStreamSynchronize(stream));  // host is refilled next
    }
    return out;
}

DeviceLinear upload_linear(const Linear& l, cudaStream_t stream, int64_t& bytes, const Target& to) {
    DeviceLinear d;
    d.m = l.out_features();
    d.n = l.in_features();
    PackedScratch* scratch = to.scratch;
    if (to.format == WeightFormat::f16) {
        if (const auto* blr = dynamic_cast<const BlrLinear*>(l.w.get())) {
            const DevicePacked p = upload_packed(blr->packed(), stream);
            d.own16 = dequant_to_f16(p, d.m, d.n, to, stream);
            d.w16_transposed = true;
            bytes += 2 * d.m * d.n;
        } else {
            d.own16 = upload_half(l.w->dense(), stream, bytes);
        }
        d.w16 = d.own16.get();
        d.half_scratch = to.half_scratch;
        if (!l.bias.empty()) d.bias = upload(l.bias, stream, bytes);
        return d;
    }
    if (to.dense_blr) {  // every weight dense in float32, a BLR one formed on the device
        d.own = DVec(d.m * d.n, stream);
        d.w = d.own.get();
        bytes += 4 * d.m * d.n;
        set_weight_of(d, *l.w, to.blas, stream);
        if (!l.bias.empty()) d.bias = upload(l.bias, stream, bytes);
        return d;
    }
    if (const auto* blr = dynamic_cast<const BlrLinear*>(l.w.get())) {
        d.packed = std::make_unique<DevicePacked>(upload_packed(blr->packed(), stream));
        d.scratch = scratch;
        bytes += d.packed->bytes();
        if (!l.bias.empty()) d.bias = upload(l.bias, stream, bytes);
        return d;
    }
    const MatF w = l.w->dense();
    CORTIQ_ASSERT(w.rows() == d.m && w.cols() == d.n);
    d.own = upload(w.vec(), stream, bytes);
    d.w = d.own.get();
    mark_tf32(d, stream);
    if (!l.bias.empty()) d.bias = upload(l.bias, stream, bytes);
    return d;
}

DeviceDelta upload_delta(const DeltaNetWeights& w, cudaStream_t stream, int64_t& bytes,
                         const Target& scratch) {
    DeviceDelta d;
    d.qkv = upload_linear(w.qkv, stream, bytes, scratch);
    d.z = upload_linear(w.z, stream, bytes, scratch);
    d.b = upload_linear(w.b, stream, bytes, scratch);
    d.a = upload_linear(w.a, stream, bytes, scratch);
    d.out = upload_linear(w.out, stream, bytes, scratch);
    d.conv = upload(w.conv.vec(), stream, bytes);
    d.a_log = upload(w.a_log, stream, bytes);
    d.dt_bias = upload(w.dt_bias, stream, bytes);
    d.norm = upload(w.norm, stream, bytes);
    return d;
}

DeviceLayer upload_layer(const LayerWeights& w, const io::ModelConfig& c, cudaStream_t stream,
                         int64_t& bytes, const Target& to) {
    DeviceLayer l;
    l.input_norm = upload(w.input_norm, stream, bytes);
    l.post_attn_norm = upload(w.post_attn_norm, stream, bytes);
    l.gate = upload_linear(w.gate, stream, bytes, to);
    l.up = upload_linear(w.up, stream, bytes, to);
    l.down = upload_linear(w.down, stream, bytes, to);
    if (w.mixer == io::Mixer::gated_delta) {
        l.delta_mixer = true;
        l.delta = upload_delta(w.delta, stream, bytes, to);
        return l;
    }
    if (c.qk_norm) {
        l.q_norm = upload(w.q_norm, stream, bytes);
        l.k_norm = upload(w.k_norm, stream, bytes);
    }
    l.q = upload_linear(w.q, stream, bytes, to);
    l.k = upload_linear(w.k, stream, bytes, to);
    l.v = upload_linear(w.v, stream, bytes, to);
    l.o = upload_linear(w.o, stream, bytes, to);
    return l;
}

int64_t linear_bytes(const DeviceLinear& d) {
    return 4 * (d.own.size() + d.bias.size()) + 2 * d.own16.size() +
           (d.packed ? d.packed->bytes() : 0);
}

int64_t layer_bytes(const DeviceLayer& l) {
    int64_t b =
        4 * (l.input_norm.size() + l.post_attn_norm.size() + l.q_norm.size() + l.k_norm.size());
    for (const auto* d : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down, &l.delta.qkv, &l.delta.z,
                          &l.delta.b, &l.delta.a, &l.delta.out})
        b += linear_bytes(*d);
    return b + 4 * (l.delta.conv.size() + l.delta.a_log.size() + l.delta.dt_bias.size() +
                    l.delta.norm.size());
}

}  // namespace

void load_layer(DeviceWeights& d, const Model& m, int64_t layer, cudaStream_t stream,
                cublasHandle_t blas) {
    CORTIQ_CHECK(layer >= 0 && layer < static_cast<int64_t>(d.layers.size()), "layer {} of {}",
                 layer, d.layers.size());
    release_layers(d, stream);
    Target to{WeightFormat::native, d.scratch.get(), d.half_scratch.get(), blas};
    to.dense_blr = true;
    d.layers[static_cast<size_t>(layer)] =
        upload_layer(m.layer(layer), m.config(), stream, d.bytes, to);
    // the host's weights are read now: a mapped layer's pages go back after
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

void release_layers(DeviceWeights& d, cudaStream_t stream) {
    CUDA_CHECK(cudaStreamSynchronize(stream));  // nothing queued still reads them
    for (DeviceLayer& l : d.layers) {
        if (!l.resident) continue;
        d.bytes -= layer_bytes(l);
        l = DeviceLayer{};
        l.resident = false;
    }
}

DeviceWeights upload_weights(const Model& m, cudaStream_t stream, cublasHandle_t blas,
                             WeightFormat format, bool head_f16, bool layers_on_demand) {
    const io::ModelConfig& c = m.config();
    DeviceWeights d;
    const Target to{format, d.scratch.get(), d.half_scratch.get(), blas};
    const Embedding& e = m.embedding();
    // a mapped table is read from its file once, for every copy made here
    std::shared_ptr<const MatF> table;
    auto float_table = [&]() -> const MatF& {
        if (!table) table = e.float_table();
        return *table;
    };
    if (format == WeightFormat::f16) {
        d.embed16 = upload_half(float_table(), stream, d.bytes);
    } else if (!e.packed()) {
        d.embed = upload(float_table().vec(), stream, d.bytes);
    } else if (!m.head_shares_embedding()) {
        d.embed_own = std::make_unique<DevicePacked>(upload_packed(*e.packed_ptr(), stream));
        d.bytes += d.embed_own->bytes();
        d.embed_packed = d.embed_own.get();
    }
    d.layers.resize(static_cast<size_t>(m.num_layers()));
    for (int64_t i = 0; i < m.num_layers(); ++i) {
        DeviceLayer& l = d.layers[static_cast<size_t>(i)];
        if (layers_on_demand)
            l.resident = false;
        else
            l = upload_layer(m.layer(i), c, stream, d.bytes, to);
    }
    d.final_norm = upload(m.final_norm(), stream, d.bytes);
    // A head that shares the embedding's storage (tied, and no lm_head.weight
    // of its own in the file) shares it on the device too: a float table
    // (w) or an fp16 one (w16).
    auto tied_head = [&](const float* w, const __half* w16) {
        d.lm_head.w = w;
        d.lm_head.w16 = w16;
        if (w16) d.lm_head.half_scratch = d.half_scratch.get();
        d.lm_head.m = c.vocab_size;
        d.lm_head.n = c.hidden_size;
        mark_tf32(d.lm_head, stream);
    };
    if (m.head_shares_embedding() && format == WeightFormat::f16) {
        tied_head(nullptr, d.embed16.get());
    } else if (m.head_shares_embedding() && !e.packed() && head_f16) {
        // an fp16 copy for the head; the lookups keep the float32 table, so
        // that the head is the one thing that changes
        d.lm_head.own16 = upload_half(float_table(), stream, d.bytes);
        tied_head(nullptr, d.lm_head.own16.get());
    } else if (m.head_shares_embedding() && !e.packed()) {
        tied_head(d.embed.get(), nullptr);
    } else {
        Target head = to;
        if (head_f16) head.format = WeightFormat::f16;
        const bool packed = dynamic_cast<const BlrLinear*>(m.lm_head().w.get()) != nullptr;
        d.lm_head = upload_linear(m.lm_head(), stream, d.bytes, packed ? to : head);
        if (m.head_shares_embedding()) d.embed_packed = d.lm_head.packed.get();
    }
    return d;
}

void embed_rows(const DeviceWeights& w, const int32_t* tokens, int64_t rows, int64_t hidden,
                float* out, cudaStream_t stream) {
    if (w.embed_packed)
        embed_packed(tokens, *w.embed_packed, rows, out, stream);
    else if (!w.embed16.empty())
        embed(tokens, w.embed16.get(), rows, hidden, out, stream);
    else
        embed(tokens, w.embed.get(), rows, hidden, out, stream);
}

void set_weight_of(DeviceLinear& d, const LinearWeights& w, cublasHandle_t blas,
                   cudaStream_t stream) {
    if (const auto* blr = dynamic_cast<const BlrLinear*>(&w); blr && !blr->packed().sign)
        return set_weight_blr(d, blr->packed(), blas, stream);
    set_weight(d, w.dense(), stream);
}

void mark_tf32(DeviceLinear& d, cudaStream_t stream) {
    d.w_tf32 = d.w && cortiq::cuda::exact_in_tf32(stream, d.w, d.m * d.n);
}

void set_weight(DeviceLinear& d, const MatF& w, cudaStream_t stream) {
    CORTIQ_CHECK(w.rows() == d.m && w.cols() == d.n && d.own.get() == d.w && !d.packed && !d.w16,
                 "set_weight: a {}x{} weight for a {}x{} layer{}", w.rows(), w.cols(), d.m, d.n,
                 d.own.get() == d.w ? "" : " that shares its storage");
    CUDA_CHECK(cudaMemcpyAsync(d.own.get(), w.data(), static_cast<size_t>(w.size()) * sizeof(float),
                               cudaMemcpyHostToDevice, stream));
    mark_tf32(d, stream);  // waits: the host matrix may be freed once this returns
}

namespace {

// A dense float32 product of many rows (calibration's batches, distillation's
// teacher, prefill) runs in 3xTF32 on the tensor cores (core/cuda/gemm_tf32.hpp:
// float32 accuracy, about twice the speed of FP32 sgemm at these sizes); a
// few rows (decode) and products captured into a CUDA graph stay in sgemm.
// CORTIQ_MODEL_FP32=1 keeps sgemm everywhere (read once per process).
constexpr int64_t kTf32x3MinRows = 64;

bool tf32x3_rows(int64_t rows, cudaStream_t stream) {
    static const bool fp32 = knob("CORTIQ_MODEL_FP32", 0, 0, 1) != 0;
    if (fp32 || rows < kTf32x3MinRows) return false;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    return capture == cudaStreamCaptureStatusNone;
}

}  // namespace

void linear(cublasHandle_t blas, cudaStream_t stream, const DeviceLinear& l, const float* x,
            int64_t rows, float* y, float beta) {
    if (rows == 0) return;
    if (l.packed)
        return packed_linear(blas, stream, *l.packed, *l.scratch, x, rows, y, beta,
                             l.bias.empty() ? nullptr : l.bias.get());
    const float one = 1.0f;
    if (l.w16) {  // fp16 weight and input, float32 accumulation and output
        auto& x16 = l.half_scratch->x;
        if (x16.size() < rows * l.n) x16 = cortiq::cuda::DeviceBuffer<__half>(rows * l.n, stream);
        to_f16(x, rows * l.n, x16.get(), stream);
        // W row-major (m × n) is Wᵀ column-major: OP_T, leading dimension n;
        // a dequantised Ŵᵀ row-major is Ŵ column-major: OP_N, leading m
        const bool t = l.w16_transposed;
        CUBLAS_CHECK(cublasGemmEx(
            blas, t ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(l.m),
            static_cast<int>(rows), static_cast<int>(l.n), &one, l.w16, CUDA_R_16F,
            static_cast<int>(t ? l.m : l.n), x16.get(), CUDA_R_16F, static_cast<int>(l.n), &beta, y,
            CUDA_R_32F, static_cast<int>(l.m), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        if (!l.bias.empty()) add_bias(y, l.bias.get(), rows, l.m, stream);
        return;
    }
    if (tf32x3_rows(rows, stream)) {  // y = x Wᵀ, row-major, at float32 accuracy
        cortiq::cuda::gemm_tf32x3(blas, stream, false, true, rows, l.m, l.n, 1.0f, x, l.n, l.w, l.n,
                                  beta, y, l.m,
                                  l.w_tf32 ? cortiq::cuda::kExactB : cortiq::cuda::kNone);
        if (!l.bias.empty()) add_bias(y, l.bias.get(), rows, l.m, stream);
        return;
    }
    // Column-major view: yᵀ (m × rows) = W (m × n, i.e. the row-major n-wide
    // matrix transposed) · xᵀ (n × rows).
    CUBLAS_CHECK(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(l.m),
                             static_cast<int>(rows), static_cast<int>(l.n), &one, l.w,
                             static_cast<int>(l.n), x, static_cast<int>(l.n), &beta, y,
                             static_cast<int>(l.m)));
    if (!l.bias.empty()) add_bias(y, l.bias.get(), rows, l.m, stream);
}

namespace {

// A compressed layer as one output of a packed group.
PackedOut packed_out(const DeviceLinear& l, float* y) {
    return {l.packed.get(), y, 0.0f, l.bias.empty() ? nullptr : l.bias.get()};
}

}  // namespace

void linear_group(cublasHandle_t blas, cudaStream_t stream,
                  std::initializer_list<const DeviceLinear*> ls, const float* x, int64_t rows,
                  std::initializer_list<float*> ys) {
    CORTIQ_ASSERT(ls.size() == ys.size());
    std::vector<PackedOut> packed;
    PackedScratch* scratch = nullptr;
    auto y = ys.begin();
    for (const DeviceLinear* l : ls) {
        float* out = *y++;
        if (l->packed && (!scratch || scratch == l->scratch)) {
            scratch = l->scratch;
            packed.push_back(packed_out(*l, out));
        } else {
            linear(blas, stream, *l, x, rows, out, 0.0f);
        }
    }
    if (!packed.empty())
        packed_linear_group(blas, stream, packed.data(), static_cast<int>(packed.size()), *scratch,
                            x, rows);
}

void linear_group_normed(cublasHandle_t blas, cudaStream_t stream,
                         std::initializer_list<const DeviceLinear*> ls, const float* x,
                         const InputNorm& norm, float* n_buf, int64_t n, int64_t rows,
                         std::initializer_list<float*> ys) {
    CORTIQ_ASSERT(ls.size() == ys.size());
    PackedScratch* scratch = nullptr;
    bool fused = rows > 0;
    for (const DeviceLinear* l : ls) {
        fused = fused && l->packed && (!scratch || scratch == l->scratch);
        scratch = l->scratch;
    }
    if (fused && decode_norms_input(*scratch, rows)) {
        std::vector<PackedOut> packed;
        auto y = ys.begin();
        for (const DeviceLinear* l : ls) packed.push_back(packed_out(*l, *y++));
        return packed_linear_group_normed(blas, stream, packed.data(),
                                          static_cast<int>(packed.size()), *scratch, x, norm, rows);
    }
    rmsnorm(x, rows, n, norm.w, norm.eps, n_buf, stream);
    linear_group(blas, stream, ls, n_buf, rows, ys);
}

void linear_swiglu(cublasHandle_t blas, cudaStream_t stream, const DeviceLinear& l, float* gate,
                   const float* up, int64_t rows, float* y, float beta) {
    if (l.packed && decode_norms_input(*l.scratch, rows))
        return packed_linear_swiglu(blas, stream, *l.packed, *l.scratch, gate, up, rows, y, beta,
                                    l.bias.empty() ? nullptr : l.bias.get());
    swiglu(gate, up, rows * l.n, stream);
    linear(blas, stream, l, gate, rows, y, beta);
}

}  // namespace cortiq::model::cuda
