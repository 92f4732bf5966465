// The compressed embedding on the device (model/cuda/embed_packed.cu) against
// the CPU lookup (model::Embedding): stories260K with its embedding
// compressed, tied (the head reads the embedding's bits on the device too)
// and with a float head of its own (the embedding's bits uploaded alone);
// the GPU forward against the CPU forward. Skips without a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "gpu_skip.hpp"
#include "io/safetensors.hpp"
#include "model/gpu_model.hpp"
#include "model/llama.hpp"
#include "quantize/quantize.hpp"
#include "quick_quantize.hpp"
#include "test_files.hpp"

using namespace cortiq;
using namespace cortiq::test;

namespace {

// GPU against CPU on the same weights: float32 rounding in two summation
// orders (as test_forward_gpu.cpp's kGpuCpuTol).
constexpr double kGpuCpuTol = 1e-4;
// A tied head is the compressed embedding run as a packed layer, whose batch
// path rounds activations to fp16 (test_blr_linear_gpu.cpp's kLayerTol).
constexpr double kPackedHeadTol = 1e-3;

void check_gpu_against_cpu(const std::string& path, const std::string& tag, double tol) {
    const auto m = model::Model::load(path);
    ASSERT_TRUE(m.embedding().packed()) << tag;
    model::GpuModel gm(m);
    std::vector<int32_t> toks;
    for (int i = 0; i < 60; ++i) toks.push_back((i * 37 + 11) % 512);
    const MatF cpu = m.forward(toks), gpu = gm.forward(toks);
    ASSERT_EQ(cpu.size(), gpu.size());
    EXPECT_LT(rel_err(gpu.data(), cpu.data(), cpu.size()), tol) << tag;
}

}  // namespace

TEST(EmbeddingGpu, CompressedRowsMatchTheCpu) {
    REQUIRE_GPU();
    REQUIRE_DATA();
    const fs::path d = scratch_dir("cortiq_embgpu_", "e");
    // only the embedding compressed: float layers run the same float32
    // arithmetic on both devices (packed layers' fp16 batch path would add
    // its own ~1e-3), so the lookup is what is compared
    std::ofstream(d / "plan.json")
        << R"({"model.layers.*": null, "model.embed_tokens.weight": 2.0})";
    quant::QuantizeOptions o = quick_stories_options(d / "e.safetensors");
    o.plan_path = (d / "plan.json").string();
    quant::quantize(o);
    check_gpu_against_cpu(o.out_path, "tied", kPackedHeadTol);
    // the same file with a float head of its own
    const auto f = io::SafetensorsFile::open(o.out_path);
    const auto tied = model::Model::load(o.out_path);
    const MatF head = tied.embedding().dense();
    io::SafetensorsWriter w;
    for (const auto& t : f.tensors()) w.add(t.name, t.dtype, t.shape, f.bytes(t));
    w.add("lm_head.weight", io::DType::F32, {head.rows(), head.cols()},
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(head.data()),
                                   sizeof(float) * static_cast<size_t>(head.size())));
    for (const auto& [k, v] : f.metadata()) w.set_metadata(k, v);
    w.write((d / "u.safetensors").string());
    const auto untied = model::Model::load((d / "u.safetensors").string());
    EXPECT_FALSE(untied.head_shares_embedding());
    // with a float head the embedding's lookup is the only packed step
    check_gpu_against_cpu((d / "u.safetensors").string(), "own head", kGpuCpuTol);
    fs::remove_all(d);
}
