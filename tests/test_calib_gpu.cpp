// Sequential calibration on the GPU (calib::SequentialCalib with
// model::Device::gpu) against the CPU path on the same windows: the float64
// Grams (and the cross Grams with the original model) of every linear-layer input, after a weight
// is replaced, after the states move through a block, and of the LM head's input; then quantize
// --device gpu end to end. Skips without a GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>
#ifdef CORTIQ_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "blr/model.hpp"
#include "blr/packed.hpp"
#include "calib/calib.hpp"
#include "calib/gpu_drift.hpp"
#include "calib/sequential.hpp"
#include "core/rng.hpp"
#include "forward_reference.hpp"
#include "gpu_skip.hpp"
#include "model/blr_linear.hpp"
#include "model/gpu_model.hpp"
#include "model/llama.hpp"
#include "quality.hpp"
#include "quantize/quantize.hpp"
#include "test_files.hpp"

using namespace cortiq;
using namespace cortiq::test;

namespace {

double rel(const MatD& a, const MatD& b) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < a.size(); ++i) {
        num += (a.data()[i] - b.data()[i]) * (a.data()[i] - b.data()[i]);
        den += b.data()[i] * b.data()[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

// Float32 activations from two GEMM libraries, Grams summed in float64
// (the GPU's rows widened before the product, the CPU's per-block float32
// product): float32 rounding only.
constexpr double kGramTol = 1e-5;

calib::CalibSet windows(int64_t vocab, int64_t n_fit, int64_t n_sel, int64_t T, uint64_t seed) {
    Rng rng(seed);
    calib::CalibSet cs;
    auto one = [&] {
        std::vector<int32_t> w(static_cast<size_t>(T));
        for (auto& t : w) t = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(vocab));
        return w;
    };
    for (int64_t i = 0; i < n_fit; ++i) cs.fit.push_back(one());
    for (int64_t i = 0; i < n_sel; ++i) cs.sel.push_back(one());
    return cs;
}

// n floats of device memory, once every stream's work is done (the tests
// that call it skip without a GPU).
std::vector<float> download(const float* p, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
#ifdef CORTIQ_HAVE_CUDA
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.data(), p, out.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
#else
    ADD_FAILURE() << "no CUDA in this build: " << p;
#endif
    return out;
}

// The payload of a random BLR layer shaped like `lin`: rank r, `paths`
// paths, scales in [0.05, 1.05), random signs.
std::vector<uint8_t> random_blr_payload(const model::Linear& lin, int64_t r, int paths,
                                        uint64_t seed) {
    const int64_t m = lin.out_features(), n = lin.in_features();
    Rng rng(seed);
    blr::Factors f{m, n, r, {}};
    for (int p = 0; p < paths; ++p) {
        blr::Path q{VecD(m), VecD(r), VecD(n), MatD(m, r), MatD(n, r)};
        for (auto* v : {&q.h, &q.l, &q.g})
            for (int64_t i = 0; i < v->size(); ++i) (*v)[i] = 0.05 + rng.uniform();
        for (auto* s : {&q.su, &q.sv})
            for (int64_t i = 0; i < s->size(); ++i) s->data()[i] = rng.uniform() < 0.5 ? -1 : 1;
        f.paths.push_back(std::move(q));
    }
    return blr::pack(f);
}

void expect_same(const std::pair<MatD, MatD>& g, const std::pair<MatD, MatD>& c,
                 const std::string& what) {
    ASSERT_EQ(g.first.rows(), c.first.rows()) << what;
    EXPECT_LT(rel(g.first, c.first), kGramTol) << what << " (fit)";
    EXPECT_LT(rel(g.second, c.second), kGramTol) << what << " (held out)";
}

}  // namespace

TEST(CalibGpu, GramsEqualTheCpuPathThroughReplacedWeightsAndBlocks) {
    REQUIRE_GPU();
    REQUIRE_MODEL("tiny-llama-6m");
    REQUIRE_MODEL("tiny-qwen3-6m");
    for (const char* name : {"tiny-llama-6m", "tiny-qwen3-6m"}) {
        model::Model cpu_m = model::Model::load((kData / "models" / name).string());
        model::Model gpu_m = model::Model::load((kData / "models" / name).string());
        // the uncompressed model, for the cross Grams of --match original
        const model::Model orig = model::Model::load((kData / "models" / name).string());
        // 5 fit and 3 held-out windows of 64 tokens
        const calib::CalibSet cs = windows(cpu_m.config().vocab_size, 5, 3, 64, 7);
        calib::SequentialCalib cpu(cpu_m, cs, model::Device::cpu, &orig);
        calib::SequentialCalib gpu(gpu_m, cs, model::Device::gpu, &orig);
        for (int64_t l = 0; l < 2; ++l) {
            for (const char* input :
                 {"self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.down_proj"}) {
                expect_same(gpu.grams(l, input), cpu.grams(l, input),
                            fmt::format("{} layer {} {}", name, l, input));
                const auto gpu_cross = gpu.cross_grams(l, input);
                expect_same(gpu_cross, cpu.cross_grams(l, input),
                            fmt::format("{} layer {} {} (cross)", name, l, input));
                // one pass for both (quantize's path): the same bits as the two apart
                const auto both = gpu.grams_with_cross(l, input);
                const auto gpu_h = gpu.grams(l, input);
                EXPECT_EQ(both.h_fit.vec(), gpu_h.first.vec()) << name << " " << l << " " << input;
                EXPECT_EQ(both.h_sel.vec(), gpu_h.second.vec()) << name << " " << l << " " << input;
                EXPECT_EQ(both.cross_fit.vec(), gpu_cross.first.vec()) << name << " " << input;
                EXPECT_EQ(both.cross_sel.vec(), gpu_cross.second.vec()) << name << " " << input;
                // replace the layer that reads this input by a changed copy on both sides
                const std::string lin = input;
                for (model::Model* m : {&cpu_m, &gpu_m}) {
                    MatF w = m->linear(l, lin).w->dense();
                    for (int64_t i = 0; i < w.size(); ++i)
                        w.data()[i] *= 0.5f + 0.25f * static_cast<float>(i % 3);
                    m->linear(l, lin).w = std::make_unique<model::DenseLinear>(std::move(w));
                }
                cpu.weight_changed(l, lin);
                gpu.weight_changed(l, lin);
            }
            cpu.advance(l);
            gpu.advance(l);
        }
        // the o_proj input of layer 2 depends on every replaced weight before it
        expect_same(gpu.grams(2, "self_attn.o_proj"), cpu.grams(2, "self_attn.o_proj"),
                    fmt::format("{} layer 2 o_proj after replacements", name));
        for (int64_t l = 2; l < cpu_m.num_layers(); ++l) {
            cpu.advance(l);
            gpu.advance(l);
        }
        expect_same(gpu.head_grams(), cpu.head_grams(), fmt::format("{} lm_head", name));
    }
}

// Once released for distillation, the GPU states are gone (a Gram throws; a
// replaced weight is ignored); on the CPU there is nothing to release and the
// states stay.
TEST(CalibGpu, ReleasedStatesAreGoneOnTheGpuOnly) {
    REQUIRE_GPU();
    REQUIRE_DATA();
    model::Model m = model::Model::load((kData / "models" / "stories260K").string());
    const model::Model orig = model::Model::load((kData / "models" / "stories260K").string());
    const calib::CalibSet cs = windows(m.config().vocab_size, 3, 1, 64, 5);
    calib::SequentialCalib gpu(m, cs, model::Device::gpu, &orig);
    gpu.advance(0);
    gpu.release_gpu();
    EXPECT_FALSE(gpu.on_device());
    EXPECT_THROW(gpu.grams(1, "mlp.down_proj"), Error);
    EXPECT_NO_THROW(gpu.weight_changed(0, "mlp.down_proj"));
    calib::SequentialCalib cpu(m, cs, model::Device::cpu, &orig);
    cpu.release_gpu();
    EXPECT_NO_THROW(cpu.grams(0, "mlp.down_proj"));
}

// A model whose layers go to the device one at a time (GpuModel::load_layer,
// as the calibration and the distillation's teacher hold them) computes the
// whole model's head inputs bit for bit, a compressed layer included (formed
// dense on the device as set_linear forms it); running a layer that is not
// loaded throws.
TEST(CalibGpu, LayersLoadedOneAtATimeGiveTheWholeModelsBits) {
    REQUIRE_GPU();
    REQUIRE_DATA();
    const std::string dir = (kData / "models" / "stories260K").string();
    model::Model m = model::Model::load(dir);
    const std::vector<uint8_t> bytes =
        random_blr_payload(m.linear(1, "self_attn.o_proj"), 11, 1, 23);
    const calib::CalibSet cs = windows(m.config().vocab_size, 2, 1, 48, 13);
    // the whole model uploaded float, the compressed layer put in by set_linear
    model::GpuModel whole(m);
    m.linear(1, "self_attn.o_proj").w =
        std::make_unique<model::BlrLinear>(blr::PackedWeight::from_payload(bytes, "test"));
    whole.set_linear(1, "self_attn.o_proj", *m.linear(1, "self_attn.o_proj").w);
    const std::vector<float> want =
        download(whole.final_hidden_on_device(cs.fit[0]), 48 * m.config().hidden_size);
    // the layers one at a time, read from the host model with the compressed layer in it
    model::GpuModel lazy(m, model::GpuOptions{.layers_on_demand = true});
    const int64_t H = m.config().hidden_size, T = 48;
    float* x = lazy.work_rows(T);
    lazy.embed_into(cs.fit[0], x);
    EXPECT_THROW(lazy.run_block(0, 1, T, x), Error);
    for (int64_t l = 0; l < m.num_layers(); ++l) {
        lazy.load_layer(l, m);
        for (int64_t k = 0; k < m.num_layers(); ++k) EXPECT_EQ(lazy.layer_loaded(k), k == l);
        lazy.run_block(l, 1, T, x);
    }
    const std::vector<float> got = download(lazy.final_norm_rows(x, T), T * H);
    EXPECT_TRUE(got == want) << "the head inputs differ";
    lazy.release_layers();
    EXPECT_FALSE(lazy.layer_loaded(m.num_layers() - 1));
    EXPECT_THROW(lazy.final_hidden_on_device(cs.fit[0]), Error);
}

// A compressed layer put in the calibration's GPU model as its packed form
// (model::GpuModel::set_linear forms the dense weight on the device, in
// float64) against the host's float64 dense form of the same payload: the
// Grams of the next block's input agree to the float32 rounding of the weight
// (two paths, a rank not a multiple of 4).
TEST(CalibGpu, PackedLayerFormsTheHostDenseWeight) {
    REQUIRE_GPU();
    REQUIRE_DATA();
    const std::string dir = (kData / "models" / "stories260K").string();
    model::Model packed_m = model::Model::load(dir), dense_m = model::Model::load(dir);
    const calib::CalibSet cs = windows(packed_m.config().vocab_size, 3, 1, 64, 9);
    calib::SequentialCalib on_packed(packed_m, cs, model::Device::gpu);
    calib::SequentialCalib on_dense(dense_m, cs, model::Device::gpu);
    const std::vector<uint8_t> bytes =
        random_blr_payload(packed_m.linear(0, "mlp.down_proj"), 13, 2, 21);
    packed_m.linear(0, "mlp.down_proj").w =
        std::make_unique<model::BlrLinear>(blr::PackedWeight::from_payload(bytes, "test"));
    dense_m.linear(0, "mlp.down_proj").w =
        std::make_unique<model::DenseLinear>(blr::dequant(bytes));
    on_packed.weight_changed(0, "mlp.down_proj");
    on_dense.weight_changed(0, "mlp.down_proj");
    on_packed.advance(0);
    on_dense.advance(0);
    // every weight the same float up to a last-bit tie of the float64 sums
    const auto gp = on_packed.grams(1, "mlp.gate_proj"), gd = on_dense.grams(1, "mlp.gate_proj");
    EXPECT_LT(rel(gp.first, gd.first), 1e-7);
    EXPECT_LT(rel(gp.second, gd.second), 1e-7);
}

// Block tuning's windows left on the device (block_pairs_on_device) hold
// the values of the host copies (block_pairs), bit for bit: the compressed
// model's states entering the block and the original's block outputs.
TEST(CalibGpu, BlockPairsOnTheDeviceEqualTheHostCopies) {
    REQUIRE_GPU();
    REQUIRE_DATA();
    const std::string dir = (kData / "models" / "stories260K").string();
    model::Model m = model::Model::load(dir);
    const model::Model orig = model::Model::load(dir);
    const calib::CalibSet cs = windows(m.config().vocab_size, 3, 2, 64, 13);
    calib::SequentialCalib gpu(m, cs, model::Device::gpu, &orig);
    // the compressed model's states differ from the original's after layer 0
    Rng rng(3);
    model::Linear& lin = m.linear(0, "mlp.down_proj");
    MatF w = lin.w->dense();
    for (int64_t i = 0; i < w.size(); ++i)
        w.data()[i] *= static_cast<float>(0.9 + 0.2 * rng.uniform());
    lin.w = std::make_unique<model::DenseLinear>(std::move(w));
    gpu.weight_changed(0, "mlp.down_proj");
    gpu.advance(0);
    ASSERT_TRUE(gpu.on_device());
    for (int set : {0, 1}) {
        const auto [hx, hy] = gpu.block_pairs(set, 1);
        const calib::SequentialCalib::DevicePairs d = gpu.block_pairs_on_device(set, 1);
        ASSERT_EQ(d.x.windows, static_cast<int64_t>(hx.size()));
        ASSERT_EQ(d.y.windows, static_cast<int64_t>(hy.size()));
        const int64_t each = d.x.rows * d.x.cols;
        ASSERT_EQ(each, hx[0].size());
        const std::vector<float> dx = download(d.x.data, d.x.windows * each);
        const std::vector<float> dy = download(d.y.data, d.y.windows * each);
        for (size_t i = 0; i < hx.size(); ++i) {
            EXPECT_TRUE(std::equal(hx[i].data(), hx[i].data() + each, dx.begin() + i * each))
                << "set " << set << ", window " << i << ": inputs";
            EXPECT_TRUE(std::equal(hy[i].data(), hy[i].data() + each, dy.begin() + i * each))
                << "set " << set << ", window " << i << ": targets";
        }
        EXPECT_FALSE(std::equal(dx.begin(), dx.end(), dy.begin())) << "the block changes nothing";
    }
    gpu.free_block_pairs();
    EXPECT_NO_THROW(gpu.grams(1, "mlp.down_proj"));
}

TEST(CalibGpu, ManyBatchesEqualOne) {
    REQUIRE_GPU();
    REQUIRE_DATA();
    // 40 windows of 512 tokens: 20480 rows, more than one GPU batch of 16384
    model::Model m = model::Model::load((kData / "models" / "stories260K").string());
    model::Model m2 = model::Model::load((kData / "models" / "stories260K").string());
    const calib::CalibSet cs = windows(m.config().vocab_size, 40, 2, 512, 11);
    const model::Model orig = model::Model::load((kData / "models" / "stories260K").string());
    calib::SequentialCalib gpu(m, cs, model::Device::gpu, &orig);
    calib::SequentialCalib cpu(m2, cs, model::Device::cpu, &orig);
    // layer 0's MLP replaced: the cross Gram of layer 1 differs from the Gram
    for (model::Model* mm : {&m, &m2}) {
        MatF w = mm->linear(0, "mlp.down_proj").w->dense();
        for (int64_t i = 0; i < w.size(); ++i) w.data()[i] *= (i % 2) ? 0.6f : -0.3f;
        mm->linear(0, "mlp.down_proj").w = std::make_unique<model::DenseLinear>(std::move(w));
    }
    gpu.weight_changed(0, "mlp.down_proj");
    cpu.weight_changed(0, "mlp.down_proj");
    gpu.advance(0);
    cpu.advance(0);
    expect_same(gpu.grams(1, "mlp.down_proj"), cpu.grams(1, "mlp.down_proj"), "stories260K down");
    // the batches of the original model and of this one pair up
    expect_same(gpu.cross_grams(1, "mlp.down_proj"), cpu.cross_grams(1, "mlp.down_proj"),
                "stories260K down (cross)");
    // block tuning's pairs: the states, and the original's block outputs (on
    // the device for the GPU path), window by window across the batches
    for (int set = 0; set < 2; ++set) {
        const auto [gx, gy] = gpu.block_pairs(set, 1);
        const auto [cx, cy] = cpu.block_pairs(set, 1);
        ASSERT_EQ(gx.size(), cx.size());
        ASSERT_EQ(gy.size(), cy.size());
        ASSERT_EQ(gy.size(), set == 0 ? 40u : 2u);
        double num = 0, den = 0, num_x = 0, den_x = 0, moved = 0;
        for (size_t w = 0; w < gy.size(); ++w) {
            ASSERT_EQ(gy[w].rows(), cy[w].rows());
            ASSERT_EQ(gy[w].cols(), cy[w].cols());
            for (int64_t i = 0; i < cy[w].size(); ++i) {
                const double d = gy[w].data()[i] - cy[w].data()[i];
                const double dx = gx[w].data()[i] - cx[w].data()[i];
                num += d * d;
                den += double{cy[w].data()[i]} * cy[w].data()[i];
                num_x += dx * dx;
                den_x += double{cx[w].data()[i]} * cx[w].data()[i];
                // the block changes its input (y is not the state itself)
                const double step = cy[w].data()[i] - cx[w].data()[i];
                moved += step * step;
            }
        }
        EXPECT_LT(std::sqrt(num / den), 1e-4) << "set " << set << ": block outputs";
        EXPECT_LT(std::sqrt(num_x / den_x), 1e-4) << "set " << set << ": states";
        EXPECT_GT(moved, 1e-6 * den) << "set " << set;
    }
}

// The drift targets on the GPU (calib/gpu_drift.hpp) against the host's
// float64 ones (quant::drift_step, drift_shrinkage) on random Grams of an
// awkward width: SPD fit and held-out Grams, cross Grams that are not
// symmetric, two weights of one input (the fit system factored once), one of
// which the held-out Grams make worth no correction (alpha clamped to 0).
TEST(CalibGpu, DriftOnTheGpuMatchesTheHost) {
    REQUIRE_GPU();
    const int64_t n = 203, t = 260;
    Rng rng(5);
    auto gaussian = [&](int64_t r, int64_t c) {
        MatD m(r, c);
        for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = rng.normal();
        return m;
    };
    // Grams of activations x (t × n) and of a drifted copy x + e
    const MatD x = gaussian(t, n), e = gaussian(t, n);
    auto gram = [&](const MatD& a, const MatD& b) {
        MatD g(n, n);
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) {
                double s = 0;
                for (int64_t k = 0; k < t; ++k) s += a(k, i) * b(k, j);
                g(i, j) = s / static_cast<double>(t);
            }
        return g;
    };
    MatD xe = x;
    for (int64_t i = 0; i < xe.size(); ++i) xe.data()[i] += 0.3 * e.data()[i];
    const MatD h_fit = gram(x, x), cross_fit = gram(xe, x);
    MatD h_sel = gram(x, x), cross_sel = gram(xe, x);
    for (int64_t i = 0; i < n; ++i) h_sel(i, i) *= 1.1;
    const double damping = 0.01;
    const MatD w1 = gaussian(77, n), w2 = gaussian(130, n);
    // cross_sel = h_sel for the second call: no held-out signal, alpha = 0
    for (int pass = 0; pass < 2; ++pass) {
        const MatD& cs = pass == 0 ? cross_sel : h_sel;
        const auto steps = calib::drift_steps_gpu({&w1, &w2}, cross_fit, h_fit, damping, cs, h_sel);
        ASSERT_EQ(steps.size(), 2u);
        for (int k = 0; k < 2; ++k) {
            const MatD& w = k == 0 ? w1 : w2;
            const MatD d = quant::drift_step(w, cross_fit, h_fit, damping);
            const double alpha = quant::drift_shrinkage(w, d, cs, h_sel);
            ASSERT_EQ(steps[k].d.rows(), w.rows());
            ASSERT_EQ(steps[k].d.cols(), n);
            EXPECT_LT(rel(steps[k].d, d), 1e-9) << "weight " << k << ", pass " << pass;
            EXPECT_NEAR(steps[k].alpha, alpha, 1e-9) << "weight " << k << ", pass " << pass;
            if (pass == 1) EXPECT_EQ(steps[k].alpha, 0.0);
        }
    }
    // a Gram of the wrong width is refused
    EXPECT_THROW(
        calib::drift_steps_gpu({&w1}, cross_fit, MatD(n + 1, n + 1), damping, cross_sel, h_sel),
        Error);
}

// quantize --device gpu against the CPU. Without --match original the
// output's inputs are recomputed apart from the run (tests/quality.hpp): every
// tensor's reported held-out error is its payload's against the true held-out
// Grams, below rtn-sign's there at no more bits, and at most kEncoderParity
// times the CPU encoder's on those same Grams. With either objective, the GPU
// run's per-tensor held-out errors stay within kRunParity of the CPU run's.
TEST(CalibGpu, QuantizeOnTheGpuMatchesTheCpuTensorByTensor) {
    REQUIRE_GPU();
    REQUIRE_DATA();
    // SPEC §3: the whole encoder's held-out error ≤ 1.02 × the CPU's on the
    // same inputs (CudaEncoder.WholeTensorWithinTwoPercentOfCpu).
    constexpr double kEncoderParity = 1.02;
    // Two whole runs differ more: each layer's Grams follow the payloads of
    // the layers before it, which the two encoders choose within that 2 %
    // (and the GPU's calibration sums in another order). Not measured on a
    // GPU yet: 1.10, five times the encoder's 2 %, as a first bound.
    constexpr double kRunParity = 1.10;
    const fs::path dir = scratch_dir("cortiq_calib_gpu_", "quantize");
    for (const bool match_original : {false, true}) {
        quant::QuantizeOptions o;
        o.model_dir = (kData / "models" / "stories260K").string();
        o.calib_paths = {(kData / "text" / "tinystories-calib.txt").string()};
        o.out_path = (dir / "gpu.safetensors").string();
        o.plan_path = (dir / "plan.json").string();  // each tensor at rtn-sign's bytes
        write_rtn_budget_plan(o.model_dir, o.plan_path);
        o.device = encode::Device::gpu;
        o.enc.gptq_group = 1;  // the exact search on both devices: SPEC §3's parity
        o.calib.samples = 16;
        o.calib.seqlen = 128;
        o.progress = false;
        o.verbose = false;
        o.force = true;
        o.match_original = match_original;
        const auto rep = quant::quantize(o);
        EXPECT_EQ(rep.tensors.size(), 35u);
        const model::Model q = model::Model::load(o.out_path);
        EXPECT_EQ(q.num_layers(), 5);
        if (!match_original) {
            const auto qs = tensor_quality(o, rep, true);
            for (const auto& miss : quality_misses(qs, kStoriesSlack)) ADD_FAILURE() << miss;
            for (const auto& t : qs) {
                std::printf("%-36s gpu %.5f (true %.5f) cpu encoder %.5f rtn-sign %.5f\n",
                            t.name.c_str(), t.err_reported, t.err_true, t.err_cpu, t.err_rtn);
                EXPECT_LE(t.err_true, kEncoderParity * t.err_cpu) << t.name;
            }
        }
        quant::QuantizeOptions oc = o;
        oc.device = encode::Device::cpu;
        oc.out_path = (dir / "cpu.safetensors").string();
        const auto rc = quant::quantize(oc);
        ASSERT_EQ(rc.tensors.size(), rep.tensors.size());
        for (size_t i = 0; i < rc.tensors.size(); ++i) {
            const auto &g = rep.tensors[i], &c = rc.tensors[i];
            ASSERT_EQ(g.name, c.name);
            std::printf("match %d %-36s held out gpu %.5f cpu %.5f (%.4fx)\n", match_original,
                        g.name.c_str(), g.err_sel, c.err_sel, g.err_sel / c.err_sel);
            EXPECT_LE(g.err_sel, kRunParity * c.err_sel) << g.name;
        }
    }
    fs::remove_all(dir);
}

// quantize --device gpu of stories260K at 1.0 bpw into `out` with block
// tuning (one pass) and a distillation of two passes with fixed signs, on 8
// windows of 64 tokens.
quant::QuantizeOptions distilled_gpu_options(const fs::path& out) {
    quant::QuantizeOptions o;
    o.model_dir = (kData / "models" / "stories260K").string();
    o.calib_paths = {(kData / "text" / "tinystories-calib.txt").string()};
    o.out_path = out.string();
    o.device = encode::Device::gpu;
    o.bpw = 1.0;
    o.tune_mode = "block+kd";
    o.tune.epochs = 1;
    o.kd.epochs = 2;
    o.kd.patience = 0;
    o.kd.lr_signs = 0;  // the packed signs and the scales read from the payloads
    o.kd_random = 0;
    o.calib.samples = 8;
    o.calib.seqlen = 64;
    o.progress = false;
    o.verbose = false;
    o.force = true;
    return o;
}

// quantize --device gpu with the signs fixed in distillation (--kd-lr-signs
// 0, the default above 100 M parameters): the host holds each block's scales
// without its signs, the device holds the signs packed, and the teacher's
// blocks leave the device once its outputs are kept. The file is the one the
// float signs give (TuneOptions::pack_fixed_signs off), byte for byte.
TEST(CalibGpu, FixedSignsDistilledFromThePayloadsWriteTheSameFile) {
    REQUIRE_GPU();
    REQUIRE_DATA();
    const fs::path dir = scratch_dir("cortiq_calib_gpu_", "fixed_signs");
    std::string files[2];
    for (const bool packed : {true, false}) {
        quant::QuantizeOptions o =
            distilled_gpu_options(dir / (packed ? "packed.safetensors" : "floats.safetensors"));
        o.kd.lr_scales = 1e-2;  // large enough that some pass is kept
        o.kd.pack_fixed_signs = packed;
        const auto rep = quant::quantize(o);
        EXPECT_EQ(rep.distilled.at("flips").get<int64_t>(), 0);
        std::printf("packed %d: KL %.5f → %.5f, pass %d kept\n", packed,
                    rep.distilled.at("kl_fit_before").get<double>(),
                    rep.distilled.at("kl_fit_after").get<double>(),
                    rep.distilled.at("best_epoch").get<int>());
        files[packed ? 0 : 1] = slurp(o.out_path);
    }
    EXPECT_FALSE(files[0].empty());
    EXPECT_TRUE(files[0] == files[1]) << "packed fixed signs changed the file";
    fs::remove_all(dir);
}

// quantize --device gpu with every tuning stage, stopped after layer 2's
// journal entry and resumed, writes the file of an uninterrupted run byte
// for byte: the resumed layers go back into the calibration's models (one
// layer on the device at a time, read from the host with its payloads) as
// the uninterrupted run left them.
TEST(CalibGpu, InterruptedTunedRunResumesIntoTheSameBytes) {
    REQUIRE_GPU();
    REQUIRE_DATA();
    const fs::path dir = scratch_dir("cortiq_calib_gpu_", "resume");
    const auto options = [&](const char* name) {
        quant::QuantizeOptions o = distilled_gpu_options(dir / name);
        o.tune.epochs = 2;
        return o;
    };
    quant::quantize(options("whole.safetensors"));
    auto o = options("resumed.safetensors");
    o.interrupt_after_layer = 2;
    EXPECT_THROW(quant::quantize(o), Error);
    EXPECT_FALSE(fs::exists(dir / "resumed.safetensors"));
    o.interrupt_after_layer = -1;
    o.force = false;
    o.resume = true;
    const auto rep = quant::quantize(o);
    EXPECT_EQ(rep.resumed_layers, 3);
    EXPECT_TRUE(slurp(dir / "whole.safetensors") == slurp(dir / "resumed.safetensors"))
        << "the resumed run wrote other bytes";
    fs::remove_all(dir);
}
