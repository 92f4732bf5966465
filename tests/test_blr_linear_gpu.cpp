// The packed layer on CUDA (model/cuda/blr_linear.hpp) against the CPU packed
// layer (itself tested against dequantise-then-dense in test_blr_linear.cpp):
// random payloads of awkward shapes, the decode kernels (1–2 rows: the row
// kernels, alone and with layers grouped, and the earlier span kernels) and the
// batch path (fp16 tiles, in one piece and in column chunks; the earlier TF32
// tiles), activations past fp16's range, accumulation into y and the bias; the
// plane decode with RMSNorm or SwiGLU applied inside its first launch against
// their own kernels; then a compressed model's perplexity on the GPU, packed,
// against the CPU. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <tuple>

#include "blr/model.hpp"
#include "blr/packed.hpp"
#include "blr/sign.hpp"
#include "blr/sign_planes.hpp"
#include "blr_fixtures.hpp"
#include "core/rng.hpp"
#include "eval/ppl.hpp"
#include "gpu_skip.hpp"
#include "io/tokenizer.hpp"
#include "model/blr_linear.hpp"
#include "model/llama.hpp"
#include "model/runtime.hpp"
#include "quantize/quantize.hpp"
#include "quick_quantize.hpp"

#ifdef CORTIQ_HAVE_CUDA
#include "model/cuda/blr_linear.hpp"
#include "model/cuda/kernels.hpp"
#endif

using namespace cortiq;
namespace fs = std::filesystem;

namespace {

// Half-precision tiles (fp16, or TF32) on the batch path: its error bound.
constexpr double kLayerTol = 1e-3;
constexpr double kPplTol = 1e-3;

blr::Factors random_model(int64_t m, int64_t n, int64_t r, int paths, uint64_t seed) {
    return test::random_factors(m, n, r, paths, seed);
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
        den += double{b[i]} * b[i];
    }
    return std::sqrt(num / den);
}

#ifdef CORTIQ_HAVE_CUDA
namespace ec = cortiq::cuda;

// y = beta·y0 + x Ŵᵀ + bias on the GPU against the CPU packed layer, x's
// rows, y0 and the bias scaled by x_scale (and every third row of x by 1e-6
// of it, to mix ranges).
// Returns the largest relative error seen.
double check_on_gpu(const std::vector<uint8_t>& bytes, const std::string& tag,
                    const model::cuda::BatchOptions& opt = {}, double x_scale = 1.0,
                    std::initializer_list<int64_t> row_counts = {1, 2, 3, 4, 5, 16, 17, 300},
                    model::cuda::Decode decode = model::cuda::Decode::planes,
                    int f16_from_rows = model::cuda::kF16DecodeFromRows) {
    const blr::PackedWeight pw = blr::PackedWeight::from_payload(bytes, tag);
    const model::BlrLinear cpu(pw);
    ec::Gpu gpu;
    const cudaStream_t st = gpu.stream();
    const auto dev = model::cuda::upload_packed(pw, st);
    model::cuda::PackedScratch ws;
    ws.batch = opt;
    ws.decode = decode;
    ws.f16_from_rows = f16_from_rows;
    double worst = 0;
    Rng rng(5);
    std::vector<float> bias(static_cast<size_t>(pw.m));
    for (auto& v : bias) v = static_cast<float>(rng.normal() * x_scale);
    for (int64_t rows : row_counts) {
        std::vector<float> x(static_cast<size_t>(rows * pw.n)),
            y0(static_cast<size_t>(rows * pw.m));
        for (size_t i = 0; i < x.size(); ++i)
            x[i] = static_cast<float>(rng.normal() * x_scale *
                                      ((i / static_cast<size_t>(pw.n)) % 3 == 2 ? 1e-6 : 1.0));
        for (auto& v : y0) v = static_cast<float>(rng.normal() * x_scale);
        for (float beta : {0.0f, 1.0f}) {
            std::vector<float> want(y0.size());
            cpu.apply(x.data(), rows, want.data());
            for (size_t i = 0; i < want.size(); ++i)
                want[i] += beta * y0[i] + bias[i % static_cast<size_t>(pw.m)];
            const auto dx = ec::upload_f(x, st), db = ec::upload_f(bias, st);
            // Decode::planes: t as wide planes, and t's planes by a launch
            for (bool t_wide : {true, false}) {
                if (!t_wide && decode != model::cuda::Decode::planes) continue;
                ws.t_wide = t_wide;
                auto dy = ec::upload_f(y0, st);
                model::cuda::packed_linear(gpu.blas(), st, dev, ws, dx.get(), rows, dy.get(), beta,
                                           db.get());
                const auto got = ec::download_f(dy.get(), dy.size(), st);
                const double e = rel_diff(got, want);
                worst = std::max(worst, e);
                EXPECT_LE(e, kLayerTol)
                    << tag << " rows " << rows << " beta " << beta << " t_wide " << t_wide;
            }
        }
    }
    return worst;
}
#endif

}  // namespace

TEST(BlrLinearGpu, PackedMatchesTheCpuOnAwkwardShapes) {
    REQUIRE_GPU();
#ifdef CORTIQ_HAVE_CUDA
    for (auto [m, n, r, p] : {std::tuple{37, 70, 13, 1},
                              {70, 37, 1, 1},
                              {130, 65, 65, 2},
                              {200, 129, 63, 1},
                              {300, 17, 5, 2},
                              {1, 1, 1, 2},
                              {1100, 700, 300, 1},
                              // several 1024-column spans in both decode products
                              {1200, 2600, 1100, 2},
                              {2100, 3000, 40, 1},
                              // a one-path layer with input rows past 8192
                              // columns (decoded by the span kernels)
                              {300, 9000, 40, 1}}) {
        const auto bytes = blr::pack(random_model(m, n, r, p, 31 * m + n));
        const std::string tag = fmt::format("{}x{} r{} P{}", m, n, r, p);
        const double e = check_on_gpu(bytes, tag);
        std::printf("%s planes decode / batch: max rel err %.3g\n", tag.c_str(), e);
        // each tensor-core decode on every row count it may take
        check_on_gpu(bytes, tag + " f16", {}, 1.0, {1, 2, 3, 8, 9, 16}, model::cuda::Decode::f16);
        check_on_gpu(bytes, tag + " planes", {}, 1.0, {3, 9, 16}, model::cuda::Decode::planes,
                     model::cuda::kPlaneDecodeRows + 1);
        // the earlier row and span kernels (decode only)
        check_on_gpu(bytes, tag + " rows", {}, 1.0, {1, 2}, model::cuda::Decode::rows);
        check_on_gpu(bytes, tag + " spans", {}, 1.0, {1, 2}, model::cuda::Decode::spans);
    }
    Rng rng(2);
    MatD s(65, 129);
    for (auto& v : s.vec()) v = rng.uniform() < 0.5 ? -1.0 : 1.0;
    VecD h(65, 0.1), g(129, 0.7);
    check_on_gpu(blr::pack_sign(s, h, g), "sign 65x129");
    check_on_gpu(blr::pack_sign(s, h, g), "sign 65x129 f16", {}, 1.0, {1, 2, 9, 16},
                 model::cuda::Decode::f16);
    check_on_gpu(blr::pack_sign(s, h, g), "sign 65x129 rows", {}, 1.0, {1, 2},
                 model::cuda::Decode::rows);
    check_on_gpu(blr::pack_sign(s, h, g), "sign 65x129 spans", {}, 1.0, {1, 2},
                 model::cuda::Decode::spans);
#endif
}

// Layers that read the same input decode in one pair of launches
// (packed_linear_group): every layer's y, with its own β and bias, equals
// what it gives alone on the CPU, for P = 1 and 2, a sign payload, shapes
// that cut into several blocks of rows, 1 and 2 rows; more layers than one
// launch takes (kMaxSignProducts) split into several launches.
TEST(BlrLinearGpu, GroupedLayersMatchTheCpuOneByOne) {
    REQUIRE_GPU();
#ifdef CORTIQ_HAVE_CUDA
    namespace mc = model::cuda;
    const int64_t n = 1500;
    std::vector<blr::PackedWeight> pws;
    for (auto [m, r, p] : {std::tuple{700, 300, 2},
                           {37, 13, 1},
                           {2000, 70, 2},
                           {5, 1, 2},
                           {900, 500, 1},
                           {300, 200, 2}})
        pws.push_back(blr::PackedWeight::from_payload(
            blr::pack(random_model(m, n, r, p, 17 * m + r)), "group"));
    Rng rng(9);
    {
        MatD s(129, n);
        for (auto& v : s.vec()) v = rng.uniform() < 0.5 ? -1.0 : 1.0;
        pws.push_back(
            blr::PackedWeight::from_payload(blr::pack_sign(s, VecD(129, 0.1), VecD(n, 0.7)), "s"));
    }
    ec::Gpu gpu;
    const cudaStream_t st = gpu.stream();
    std::vector<mc::DevicePacked> devs;
    for (const auto& pw : pws) devs.push_back(mc::upload_packed(pw, st));
    // planes with t's wide planes (the default), planes with t's planes by a
    // launch of their own (CORTIQ_T_PLANES=launch), the row kernels, the fp16
    // tensor cores
    for (int variant : {0, 1, 2, 3})
        for (int rows : {1, 2, 7, 16}) {
            if (variant == 2 && rows > mc::kDecodeRows) continue;
            mc::PackedScratch ws;
            ws.decode = variant == 2   ? mc::Decode::rows
                        : variant == 3 ? mc::Decode::f16
                                       : mc::Decode::planes;
            ws.t_wide = variant == 0;
            ws.f16_from_rows = mc::kPlaneDecodeRows + 1;
            std::vector<float> x(static_cast<size_t>(rows * n));
            for (auto& v : x) v = static_cast<float>(rng.normal());
            const auto dx = ec::upload_f(x, st);
            std::vector<ec::DVec> ys, biases;
            std::vector<std::vector<float>> want;
            std::vector<mc::PackedOut> outs;
            for (size_t l = 0; l < pws.size(); ++l) {
                const int64_t m = pws[l].m;
                std::vector<float> y0(static_cast<size_t>(rows * m)), bias(static_cast<size_t>(m));
                for (auto& v : y0) v = static_cast<float>(rng.normal());
                for (auto& v : bias) v = static_cast<float>(rng.normal());
                const float beta = l % 2 ? 1.0f : 0.0f;
                std::vector<float> w(y0.size());
                model::BlrLinear(pws[l]).apply(x.data(), rows, w.data());
                for (size_t i = 0; i < w.size(); ++i)
                    w[i] += beta * y0[i] + bias[i % static_cast<size_t>(m)];
                want.push_back(std::move(w));
                ys.push_back(ec::upload_f(y0, st));
                biases.push_back(ec::upload_f(bias, st));
                outs.push_back({&devs[l], ys.back().get(), beta, biases.back().get()});
            }
            mc::packed_linear_group(gpu.blas(), st, outs.data(), static_cast<int>(outs.size()), ws,
                                    dx.get(), rows);
            for (size_t l = 0; l < pws.size(); ++l) {
                const auto got = ec::download_f(ys[l].get(), ys[l].size(), st);
                EXPECT_LE(rel_diff(got, want[l]), kLayerTol)
                    << "layer " << l << " rows " << rows << " variant " << variant;
            }
        }
#endif
}

// Up to 16 rows decode by planes in pairs of tokens (sign_mma.cu), or on the
// fp16 tensor cores with each row a column of its own (sign_hmma.cu): every
// row of a 16-row decode equals, bit for bit, that row decoded alone by the
// same route, for a two-path layer, a one-path one and a sign payload, with
// t as wide planes and through a launch of its own.
TEST(BlrLinearGpu, EachOfSixteenDecodedRowsEqualsItDecodedAlone) {
    REQUIRE_GPU();
#ifdef CORTIQ_HAVE_CUDA
    namespace mc = model::cuda;
    Rng rng(21);
    ec::Gpu gpu;
    const cudaStream_t st = gpu.stream();
    std::vector<blr::PackedWeight> pws;
    for (auto [m, n, r, p] : {std::tuple{700, 1500, 300, 2}, {1100, 600, 530, 1}})
        pws.push_back(blr::PackedWeight::from_payload(
            blr::pack(random_model(m, n, r, p, 7 * m + n)), "rows"));
    MatD s(129, 700);
    for (auto& v : s.vec()) v = rng.uniform() < 0.5 ? -1.0 : 1.0;
    pws.push_back(
        blr::PackedWeight::from_payload(blr::pack_sign(s, VecD(129, 0.1), VecD(700, 0.7)), "s"));
    for (const auto& pw : pws)
        for (int variant : {0, 1, 2}) {
            const bool t_wide = variant == 0;
            const auto dev = mc::upload_packed(pw, st);
            mc::PackedScratch ws;
            ws.t_wide = t_wide;
            ws.decode = variant == 2 ? mc::Decode::f16 : mc::Decode::planes;
            ws.f16_from_rows = mc::kPlaneDecodeRows + 1;
            const int rows = mc::kPlaneDecodeRows;
            std::vector<float> x(static_cast<size_t>(rows * pw.n));
            for (auto& v : x) v = static_cast<float>(rng.normal());
            const auto dx = ec::upload_f(x, st);
            ec::DVec all(rows * pw.m, st), one(pw.m, st);
            mc::packed_linear(gpu.blas(), st, dev, ws, dx.get(), rows, all.get(), 0.0f, nullptr);
            const auto got_all = ec::download_f(all.get(), all.size(), st);
            for (int i = 0; i < rows; ++i) {
                mc::packed_linear(gpu.blas(), st, dev, ws, dx.get() + i * pw.n, 1, one.get(), 0.0f,
                                  nullptr);
                const auto got = ec::download_f(one.get(), one.size(), st);
                for (int64_t k = 0; k < pw.m; ++k)
                    ASSERT_EQ(got_all[static_cast<size_t>(i * pw.m + k)],
                              got[static_cast<size_t>(k)])
                        << pw.m << "×" << pw.n << " variant " << variant << " row " << i << " k "
                        << k;
            }
        }
#endif
}

// The batch path's variants, with the largest error each gives printed: the
// fp16 tiles in 32- and 64-column chunks (the chunked sum), the earlier TF32
// tiles, and activations far past fp16's range (1e6: x, t and u would
// overflow without the row scales) and far below it (1e-7).
TEST(BlrLinearGpu, BatchPathInChunksTf32AndWideRanges) {
    REQUIRE_GPU();
#ifdef CORTIQ_HAVE_CUDA
    using model::cuda::BatchMath;
    using model::cuda::BatchOptions;
    const BatchOptions f16{}, tf32{BatchMath::tf32}, tiny{BatchMath::f16, 1};
    for (auto [m, n, r, p] : {std::tuple{1100, 700, 300, 1}, {130, 65, 65, 2}, {37, 70, 13, 1}}) {
        const auto bytes = blr::pack(random_model(m, n, r, p, 7 * m + n));
        const std::string tag = fmt::format("{}x{} r{} P{}", m, n, r, p);
        const BatchOptions chunks{BatchMath::f16, 2 * 64 * std::max<int64_t>(m, r)};
        for (auto [name, o, scale] : {std::tuple{"f16", f16, 1.0},
                                      {"f16 32-column chunks", tiny, 1.0},
                                      {"f16 64-column chunks", chunks, 1.0},
                                      {"tf32", tf32, 1.0},
                                      {"f16 x·1e6", f16, 1e6},
                                      {"f16 x·1e-7", f16, 1e-7}}) {
            const double e = check_on_gpu(bytes, tag + " " + name, o, scale, {3, 64, 300});
            std::printf("%s %s: max rel err %.3g\n", tag.c_str(), name, e);
        }
        // the fp16 decode's chunk scales over the same ranges
        for (double scale : {1e6, 1e-7}) {
            const double e = check_on_gpu(bytes, tag + " f16 decode", {}, scale, {1, 5, 16},
                                          model::cuda::Decode::f16);
            std::printf("%s f16 decode x·%g: max rel err %.3g\n", tag.c_str(), scale, e);
        }
    }
#endif
}

// The plane decode of RMSNorm(x) with the norm inside its first launch
// (packed_linear_group_normed) gives what the norm kernel followed by the
// decode gives: the same float arithmetic (the row's sum of squares in
// float64 either way), so equal to float32 rounding of the sum's last bit at
// most; for P = 1 and 2, a sign payload, 1 and 2 rows, wide and narrow rows.
TEST(BlrLinearGpu, NormedDecodeEqualsTheNormThenTheDecode) {
    REQUIRE_GPU();
#ifdef CORTIQ_HAVE_CUDA
    namespace mc = model::cuda;
    Rng rng(12);
    ec::Gpu gpu;
    const cudaStream_t st = gpu.stream();
    for (int64_t n : {1500, 4096}) {
        std::vector<blr::PackedWeight> pws;
        for (auto [m, r, p] : {std::tuple{700, 300, 2}, {37, 13, 1}, {1200, 90, 1}})
            pws.push_back(blr::PackedWeight::from_payload(
                blr::pack(random_model(m, n, r, p, 5 * m + n)), "normed"));
        MatD s(129, n);
        for (auto& v : s.vec()) v = rng.uniform() < 0.5 ? -1.0 : 1.0;
        pws.push_back(
            blr::PackedWeight::from_payload(blr::pack_sign(s, VecD(129, 0.1), VecD(n, 0.7)), "s"));
        std::vector<mc::DevicePacked> devs;
        for (const auto& pw : pws) devs.push_back(mc::upload_packed(pw, st));
        std::vector<float> w(static_cast<size_t>(n));
        for (auto& v : w) v = static_cast<float>(1.0 + 0.3 * rng.normal());
        const auto dw = ec::upload_f(w, st);
        for (int rows : {1, 2, 5, 16}) {
            mc::PackedScratch ws;
            ASSERT_TRUE(mc::decode_norms_input(ws, rows));
            std::vector<float> x(static_cast<size_t>(rows * n));
            for (auto& v : x) v = static_cast<float>(3.0 * rng.normal());
            const auto dx = ec::upload_f(x, st);
            ec::DVec normed(rows * n, st);
            mc::rmsnorm(dx.get(), rows, n, dw.get(), 1e-5f, normed.get(), st);
            std::vector<ec::DVec> a, b;
            std::vector<mc::PackedOut> outs_a, outs_b;
            for (size_t l = 0; l < pws.size(); ++l) {
                a.emplace_back(rows * pws[l].m, st);
                b.emplace_back(rows * pws[l].m, st);
                outs_a.push_back({&devs[l], a.back().get()});
                outs_b.push_back({&devs[l], b.back().get()});
            }
            const int count = static_cast<int>(pws.size());
            mc::packed_linear_group(gpu.blas(), st, outs_a.data(), count, ws, normed.get(), rows);
            mc::packed_linear_group_normed(gpu.blas(), st, outs_b.data(), count, ws, dx.get(),
                                           {dw.get(), 1e-5f}, rows);
            for (size_t l = 0; l < pws.size(); ++l)
                EXPECT_LE(rel_diff(ec::download_f(b[l].get(), b[l].size(), st),
                                   ec::download_f(a[l].get(), a[l].size(), st)),
                          1e-6)
                    << "n " << n << " layer " << l << " rows " << rows;
        }
    }
    // only the plane decode norms its input
    mc::PackedScratch rows_ws;
    rows_ws.decode = mc::Decode::rows;
    EXPECT_FALSE(mc::decode_norms_input(rows_ws, 1));
    EXPECT_TRUE(mc::decode_norms_input(mc::PackedScratch{}, mc::kPlaneDecodeRows));
    EXPECT_FALSE(mc::decode_norms_input(mc::PackedScratch{}, mc::kPlaneDecodeRows + 1));
#endif
}

// The plane decode of silu(gate) ∘ up with SwiGLU inside its first launch
// (packed_linear_swiglu) gives what the SwiGLU kernel followed by the decode
// gives: the same float arithmetic; gate is left as it was.
TEST(BlrLinearGpu, SwigluDecodeEqualsSwigluThenTheDecode) {
    REQUIRE_GPU();
#ifdef CORTIQ_HAVE_CUDA
    namespace mc = model::cuda;
    Rng rng(13);
    ec::Gpu gpu;
    const cudaStream_t st = gpu.stream();
    for (auto [m, n, r, p] : {std::tuple{700, 1500, 300, 2}, {300, 4096, 90, 1}}) {
        const auto pw =
            blr::PackedWeight::from_payload(blr::pack(random_model(m, n, r, p, 3 * m + n)), "down");
        const auto dev = mc::upload_packed(pw, st);
        for (int rows : {1, 2, 3, 16}) {
            mc::PackedScratch ws;
            std::vector<float> gate(static_cast<size_t>(rows * n)), up(gate.size()),
                y0(static_cast<size_t>(rows * m));
            for (auto& v : gate) v = static_cast<float>(2.0 * rng.normal());
            for (auto& v : up) v = static_cast<float>(rng.normal());
            for (auto& v : y0) v = static_cast<float>(rng.normal());
            auto dg = ec::upload_f(gate, st);
            const auto du = ec::upload_f(up, st);
            auto ya = ec::upload_f(y0, st), yb = ec::upload_f(y0, st);
            mc::packed_linear_swiglu(gpu.blas(), st, dev, ws, dg.get(), du.get(), rows, yb.get(),
                                     1.0f, nullptr);
            EXPECT_EQ(ec::download_f(dg.get(), rows * n, st), gate) << "gate changed";
            mc::swiglu(dg.get(), du.get(), rows * n, st);
            mc::packed_linear(gpu.blas(), st, dev, ws, dg.get(), rows, ya.get(), 1.0f, nullptr);
            EXPECT_LE(rel_diff(ec::download_f(yb.get(), rows * m, st),
                               ec::download_f(ya.get(), rows * m, st)),
                      1e-6)
                << m << "×" << n << " rows " << rows;
        }
    }
#endif
}

// A compressed model scores on the GPU, packed, what it scores on the CPU, and
// holds its payloads there instead of float32 weights.
TEST(BlrLinearGpu, CompressedModelScoresAlikeOnBothDevices) {
    REQUIRE_GPU();
    REQUIRE_DATA();
    const fs::path d =
        fs::temp_directory_path() / ("cortiq_gpu_packed_" + std::to_string(getpid()));
    fs::create_directories(d);
    const quant::QuantizeOptions o = test::quick_stories_options(d / "q.safetensors");
    quant::quantize(o);
    const auto packed = model::Model::load(o.out_path);
    model::LoadOptions lo;
    lo.dequant = true;
    const auto dense = model::Model::load(o.out_path, lo);
    std::ifstream tf(test::kData / "text/tinystories-valid.txt");
    std::string text(20000, '\0');
    tf.read(text.data(), static_cast<std::streamsize>(text.size()));
    eval::PplOptions po;
    po.ctx = 128;
    po.progress = false;
    const auto ids = io::Tokenizer::load(o.model_dir).encode(text, false);
    auto cpu = model::make_runtime(packed, model::Device::cpu);
    model::RuntimeOptions exact;  // the float32 cache: the CPU's arithmetic
    exact.device = model::Device::gpu;
    exact.kv = model::KvFormat::f32;
    auto gpu = model::make_runtime(packed, exact);
    auto gpu_dense = model::make_runtime(dense, model::Device::gpu);
    const double pc = eval::perplexity(*cpu, ids, po).ppl, pg = eval::perplexity(*gpu, ids, po).ppl;
    const double pd = eval::perplexity(*gpu_dense, ids, po).ppl;
    EXPECT_NEAR(pg, pc, kPplTol * pc);
    EXPECT_NEAR(pg, pd, kPplTol * pd);
    EXPECT_LT(gpu->weight_bytes(), gpu_dense->weight_bytes());
    // decode through the KV cache: one row at a time takes the decode kernels
    gpu->reset_cache(16);
    cpu->reset_cache(16);
    for (int i = 0; i < 8; ++i) {
        const std::vector<int32_t> one{ids[static_cast<size_t>(i)]};
        const MatF a = gpu->forward_cached(one, true), b = cpu->forward_cached(one, true);
        EXPECT_LE(rel_diff(a.vec(), b.vec()), kLayerTol) << "token " << i;
    }
    fs::remove_all(d);
}

// The decode's bit planes on the device (sign_planes) equal the CPU
// reference (blr/sign_planes.hpp) bit for bit, σ and σΣq included, for g ∘ x
// of awkward lengths, two rows, mixed ranges, a zero chunk and a NaN chunk.
TEST(BlrLinearGpu, PlanesEqualTheCpuReferenceBitForBit) {
    REQUIRE_GPU();
#ifdef CORTIQ_HAVE_CUDA
    namespace mc = model::cuda;
    ec::Gpu gpu;
    const cudaStream_t st = gpu.stream();
    Rng rng(13);
    for (int64_t cols : {1, 33, 512, 1500, 11008}) {
        const int rows = cols == 1500 ? 5 : 2;
        std::vector<float> x(static_cast<size_t>(rows * cols)), g(static_cast<size_t>(cols));
        for (size_t i = 0; i < x.size(); ++i)
            x[i] = static_cast<float>(rng.normal() * ((i / 512) % 3 == 1 ? 1e-5 : 1.0) *
                                      (rng.uniform() < 0.01 ? 60.0 : 1.0));
        for (auto& v : g) v = static_cast<float>(0.5 + rng.uniform());
        if (cols > 1024) {
            for (int64_t j = 512; j < 1024; ++j)
                x[static_cast<size_t>(j)] = 0.0f;    // row 0, chunk 1
            x[static_cast<size_t>(cols + 3)] = NAN;  // row 1, chunk 0
        }
        const auto dx = ec::upload_f(x, st), dg = ec::upload_f(g, st);
        ec::DeviceBuffer<uint32_t> planes(rows * mc::plane_words(cols), st);
        ec::DeviceBuffer<float2> info(rows * mc::plane_chunks(cols), st);
        const mc::PlaneJob job{dx.get(), cols, dg.get(), cols, planes.get(), info.get()};
        mc::sign_planes(&job, 1, rows, st);
        std::vector<uint32_t> got_w(static_cast<size_t>(planes.size()));
        std::vector<float2> got_i(static_cast<size_t>(info.size()));
        CUDA_CHECK(cudaMemcpyAsync(got_w.data(), planes.get(), 4 * got_w.size(),
                                   cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaMemcpyAsync(got_i.data(), info.get(), sizeof(float2) * got_i.size(),
                                   cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        for (int i = 0; i < rows; ++i) {
            std::vector<float> v(static_cast<size_t>(cols));
            for (int64_t j = 0; j < cols; ++j)
                v[static_cast<size_t>(j)] =
                    g[static_cast<size_t>(j)] * x[static_cast<size_t>(i * cols + j)];
            const blr::Planes want = blr::planes_of(v.data(), cols);
            const size_t w0 = static_cast<size_t>(i * mc::plane_words(cols));
            for (size_t k = 0; k < want.words.size(); ++k)
                ASSERT_EQ(got_w[w0 + k], want.words[k]) << cols << " row " << i << " word " << k;
            const size_t c0 = static_cast<size_t>(i * mc::plane_chunks(cols));
            for (size_t c = 0; c < want.sigma.size(); ++c) {
                const float2 gi = got_i[c0 + c];
                if (std::isnan(want.sigma[c])) {
                    EXPECT_TRUE(std::isnan(gi.x) && std::isnan(gi.y)) << cols << " chunk " << c;
                    continue;
                }
                EXPECT_EQ(gi.x, want.sigma[c]) << cols << " row " << i << " chunk " << c;
                EXPECT_EQ(gi.y, want.sigma_sum_q[c]) << cols << " row " << i << " chunk " << c;
            }
        }
    }
#endif
}

// The first product writes t = ℓ ∘ S_Vᵀ(g ∘ x) as wide planes (sign_mma.hpp)
// that equal the CPU reference (blr::wide_bound, blr::wide_q) bit for bit,
// σ' included, with zero bits and tile sums past r (over a buffer filled with
// ones first) and exact tile sums, for awkward r and n and two rows.
TEST(BlrLinearGpu, WidePlanesOfTEqualTheCpuReferenceBitForBit) {
    REQUIRE_GPU();
#ifdef CORTIQ_HAVE_CUDA
    namespace mc = model::cuda;
    ec::Gpu gpu;
    const cudaStream_t st = gpu.stream();
    Rng rng(17);
    for (auto [r, n] :
         {std::pair<int64_t, int64_t>{1, 33}, {17, 600}, {530, 1500}, {1100, 11008}}) {
        const int rows = r == 530 ? 5 : 2;  // an odd count: a pair of blocks with one token
        const int64_t ld = ((n + 31) / 32 + 3) / 4 * 4;
        std::vector<uint32_t> words(static_cast<size_t>(r * ld + mc::kMmaTailWords));
        for (auto& w : words) w = static_cast<uint32_t>(rng.next_u64());
        std::vector<__half> ell(static_cast<size_t>(r));
        for (size_t k = 0; k < ell.size(); ++k)
            ell[k] =
                __float2half(static_cast<float>((0.5 + rng.uniform()) * (k % 7 == 3 ? 1e-3 : 1)));
        std::vector<float> x(static_cast<size_t>(rows * n)), g(static_cast<size_t>(n));
        for (auto& v : x)
            v = static_cast<float>(rng.normal() * (rng.uniform() < 0.01 ? 60.0 : 1.0));
        for (auto& v : g) v = static_cast<float>(0.5 + rng.uniform());
        ec::DeviceBuffer<uint32_t> dwords(static_cast<int64_t>(words.size()), st);
        ec::DeviceBuffer<__half> dell(r, st);
        CUDA_CHECK(cudaMemcpyAsync(dwords.get(), words.data(), 4 * words.size(),
                                   cudaMemcpyHostToDevice, st));
        CUDA_CHECK(
            cudaMemcpyAsync(dell.get(), ell.data(), 2 * ell.size(), cudaMemcpyHostToDevice, st));
        const auto dx = ec::upload_f(x, st), dg = ec::upload_f(g, st);
        const int64_t chunks_x = mc::plane_chunks(n), chunks_t = mc::plane_chunks(r);
        ec::DeviceBuffer<uint32_t> px(rows * mc::plane_words(n), st);
        ec::DeviceBuffer<float2> info(rows * chunks_x, st);
        ec::DVec abs_info(rows * chunks_x, st), t(rows * r, st), sigma(rows * chunks_t, st);
        ec::DeviceBuffer<uint32_t> wide(rows * mc::wide_plane_words(r), st);
        ec::DeviceBuffer<int32_t> tile_sum(rows * mc::wide_tiles(r), st);
        CUDA_CHECK(cudaMemsetAsync(wide.get(), 0xff, 4 * wide.size(), st));
        CUDA_CHECK(cudaMemsetAsync(tile_sum.get(), 0xff, 4 * tile_sum.size(), st));
        const mc::PlaneJob job{dx.get(), n, dg.get(), n, px.get(), info.get(), abs_info.get()};
        mc::sign_planes(&job, 1, rows, st);
        mc::MmaProduct pr;
        pr.piece[0].s = {dwords.get(), ld, r, n};
        pr.piece[0].in = {px.get(), info.get(), n, abs_info.get()};
        pr.piece[0].out_scale = dell.get();
        pr.out = t.get();
        pr.ld_out = r;
        pr.planes_out = {wide.get(), sigma.get(), tile_sum.get()};
        mc::sign_mma(&pr, 1, rows, st);
        const std::vector<float> got_t = ec::download_f(t.get(), t.size(), st),
                                 got_s = ec::download_f(sigma.get(), sigma.size(), st);
        std::vector<uint32_t> got_w(static_cast<size_t>(wide.size()));
        std::vector<int32_t> got_ts(static_cast<size_t>(tile_sum.size()));
        CUDA_CHECK(cudaMemcpyAsync(got_w.data(), wide.get(), 4 * got_w.size(),
                                   cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaMemcpyAsync(got_ts.data(), tile_sum.get(), 4 * got_ts.size(),
                                   cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        for (int i = 0; i < rows; ++i) {
            std::vector<float> v(static_cast<size_t>(n));
            for (int64_t j = 0; j < n; ++j)
                v[static_cast<size_t>(j)] =
                    g[static_cast<size_t>(j)] * x[static_cast<size_t>(i * n + j)];
            const blr::Planes want_x = blr::planes_of(v.data(), n);
            const uint32_t* wi = got_w.data() + i * mc::wide_plane_words(r);
            for (int64_t c = 0; c < chunks_t; ++c) {
                float l_max = 0;
                for (int64_t k = 512 * c; k < std::min(r, 512 * (c + 1)); ++k)
                    l_max = std::max(l_max, std::fabs(__half2float(ell[static_cast<size_t>(k)])));
                const float bound = blr::wide_bound(l_max, want_x);
                ASSERT_EQ(got_s[static_cast<size_t>(i * chunks_t + c)],
                          bound / static_cast<float>(blr::kWideQMax))
                    << r << "×" << n << " row " << i << " chunk " << c;
                for (int64_t tile = 32 * c; tile < 32 * (c + 1); ++tile) {
                    int64_t sum = 0;
                    for (int64_t k = 16 * tile; k < 16 * tile + 16; ++k) {
                        const int64_t kk = k % 512;
                        int32_t q = 0;
                        for (int b = 0; b < blr::kWidePlanes; ++b)
                            if ((wi[c * mc::kWideChunkWords + 16 * b + kk / 32] >> (kk % 32)) & 1u)
                                q += b == blr::kWidePlanes - 1 ? -(1 << b) : (1 << b);
                        const int32_t want =
                            k < r ? blr::wide_q(got_t[static_cast<size_t>(i * r + k)], bound) : 0;
                        ASSERT_EQ(q, want) << r << "×" << n << " row " << i << " k " << k;
                        sum += q;
                    }
                    ASSERT_EQ(got_ts[static_cast<size_t>(i * mc::wide_tiles(r) + tile)], sum)
                        << r << "×" << n << " row " << i << " tile " << tile;
                }
            }
            // t itself: ℓ times the plane product of the CPU reference
            for (int64_t k = 0; k < r; ++k) {
                const double want = __half2float(ell[static_cast<size_t>(k)]) *
                                    blr::plane_dot(words.data() + k * ld, want_x);
                ASSERT_NEAR(got_t[static_cast<size_t>(i * r + k)], want,
                            1e-5 * blr::wide_bound(1.0f, want_x))
                    << r << "×" << n << " row " << i << " k " << k;
            }
        }
    }
#endif
}
