// A compressed embedding (model/embedding.hpp): rows looked up from BLR and
// sign payloads against the dequantised table; quantize with a plan rule that
// names the embedding on stories260K (a tied model: the head shares the
// compressed bits), the file's bytes, resume, the loaded model against its
// dequantised twin, and a glob that does not reach the embedding.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "blr/model.hpp"
#include "blr/packed.hpp"
#include "blr/sign.hpp"
#include "blr_fixtures.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "io/safetensors.hpp"
#include "model/blr_linear.hpp"
#include "model/embedding.hpp"
#include "model/llama.hpp"
#include "quantize/quantize.hpp"
#include "require.hpp"
#include "test_files.hpp"

using namespace cortiq;
namespace fs = std::filesystem;

namespace {

const std::string kModel = test::shared("models/stories260K");
const std::string kCalib = test::shared("text/tinystories-calib.txt");

std::shared_ptr<const blr::PackedWeight> packed_of(const std::vector<uint8_t>& bytes) {
    return std::make_shared<const blr::PackedWeight>(blr::PackedWeight::from_payload(bytes, "t"));
}

// max_ij |a − b| / max_ij |b|
double max_rel(const MatF& a, const MatF& b) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < a.size(); ++i) {
        num = std::max(num, std::abs(double{a.data()[i]} - b.data()[i]));
        den = std::max(den, std::abs(double{b.data()[i]}));
    }
    return num / den;
}

// Every row of the table, in a shuffled order with repeats, against the
// dequantised payload. The lookup sums r products of f16 scales in float32
// (the dequantisation in float64, rounded once): a few float32 ulps of the
// largest entry times r.
void check_rows(const std::vector<uint8_t>& bytes, const std::string& tag) {
    const MatF w = blr::dequant_any(bytes);
    const model::Embedding e(packed_of(bytes));
    EXPECT_EQ(e.vocab(), w.rows());
    EXPECT_EQ(e.dim(), w.cols());
    std::vector<int32_t> ids;
    Rng rng(w.rows());
    for (int64_t i = 0; i < 2 * w.rows(); ++i)
        ids.push_back(static_cast<int32_t>(rng.uniform() * static_cast<double>(w.rows())) %
                      static_cast<int32_t>(w.rows()));
    const MatF got = e.rows(ids);
    MatF want(static_cast<int64_t>(ids.size()), w.cols());
    for (size_t i = 0; i < ids.size(); ++i)
        std::copy_n(w.row(ids[i]), w.cols(), want.row(static_cast<int64_t>(i)));
    const int64_t r = blr::is_sign_payload(bytes) ? 1 : blr::info(bytes).r;
    EXPECT_LE(max_rel(got, want), 1e-6 * static_cast<double>(r) + 1e-6) << tag;
    EXPECT_EQ(e.dense().vec(), w.vec()) << tag;
    EXPECT_LT(e.resident_bytes(), 4 * w.size()) << tag;
    const std::vector<int32_t> bad{0, static_cast<int32_t>(w.rows())};
    EXPECT_THROW(e.rows(bad), Error) << tag;
}

quant::QuantizeOptions options(const fs::path& out, const std::string& plan) {
    quant::QuantizeOptions o;
    o.model_dir = kModel;
    o.calib_paths = {kCalib};
    o.out_path = out.string();
    o.plan_path = plan;
    o.bpw = 1.0;
    o.calib.samples = 4;
    o.calib.seqlen = 64;
    o.enc.itq_iters = 10;
    o.progress = false;
    o.verbose = false;
    return o;
}

std::string write_plan(const fs::path& p, const std::string& json) {
    std::ofstream(p) << json;
    return p.string();
}

}  // namespace

TEST(Embedding, PackedRowsEqualTheDequantisedTable) {
    for (auto [m, n, r, p] :
         {std::tuple{37, 70, 13, 1}, {70, 37, 1, 1}, {130, 65, 65, 2}, {512, 64, 40, 2}})
        check_rows(blr::pack(test::random_factors(m, n, r, p, 3 * m + n)),
                   fmt::format("blr {}x{} r{} p{}", m, n, r, p));
    Rng rng(9);
    MatD s(45, 33);
    for (auto& v : s.vec()) v = rng.uniform() < 0.5 ? -1.0 : 1.0;
    VecD h(45), g(33);
    for (auto& v : h) v = 0.1 * std::exp(rng.normal());
    for (auto& v : g) v = std::exp(rng.normal());
    check_rows(blr::pack_sign(s, h, g), "sign 45x33");
}

TEST(Embedding, ATiedHeadSharesTheCompressedBits) {
    REQUIRE_DATA_AT(kModel);
    const fs::path d = test::scratch_dir("cortiq_emb_", "tied");
    const std::string plan = write_plan(d / "plan.json", R"({"model.embed_tokens.weight": 2.0})");
    const auto rep = quant::quantize(options(d / "e.safetensors", plan));
    ASSERT_EQ(rep.tensors.size(), 5u * 7u + 1u);
    const auto& er = rep.tensors.front();  // encoded first
    EXPECT_EQ(er.name, "model.embed_tokens.weight");
    EXPECT_EQ(rep.embed_params, 512 * 64);
    EXPECT_EQ(rep.embed_bits, er.bits);
    EXPECT_LE(er.bpw, 2.0);
    EXPECT_LT(er.err_fit, 1.0);  // least-squares scales: better than a zero table
    // the embedding is outside the linear figures
    int64_t params = 0;
    for (const auto& t : rep.tensors) params += t.m * t.n;
    EXPECT_EQ(rep.linear_params, params - 512 * 64);

    const auto f = io::SafetensorsFile::open((d / "e.safetensors").string());
    const io::TensorInfo* emb = nullptr;
    for (const auto& t : f.tensors()) {
        EXPECT_NE(t.name, "lm_head.weight");  // the head stays tied
        if (t.name == "model.embed_tokens.weight") emb = &t;
    }
    ASSERT_NE(emb, nullptr);
    EXPECT_EQ(emb->dtype, io::DType::U8);
    EXPECT_EQ(8 * static_cast<int64_t>(f.bytes(*emb).size()), er.bits);

    // packed: the head reads the embedding's bits; counted once
    const auto m = model::Model::load((d / "e.safetensors").string());
    ASSERT_TRUE(m.embedding().packed());
    EXPECT_TRUE(m.head_shares_embedding());
    const auto* head = dynamic_cast<const model::BlrLinear*>(m.lm_head().w.get());
    ASSERT_NE(head, nullptr);
    EXPECT_EQ(head->packed_ptr(), m.embedding().packed_ptr());
    model::LoadOptions lo;
    lo.dequant = true;
    const auto dq = model::Model::load((d / "e.safetensors").string(), lo);
    EXPECT_FALSE(dq.embedding().packed());
    EXPECT_TRUE(dq.head_shares_embedding());
    EXPECT_EQ(m.num_params(), dq.num_params());
    const auto src = model::Model::load(kModel);
    EXPECT_LT(m.weight_bytes(),
              src.weight_bytes() - 4 * 512 * 64 + er.bits / 8 + 4 * (64 + 512 * 2));
    // the packed model's logits against its dequantised twin's
    const std::vector<int32_t> toks{1, 45, 300, 7, 7, 511, 0, 99};
    const MatF a = m.forward(toks), b = dq.forward(toks);
    EXPECT_LE(max_rel(a, b), 1e-4);

    // stopped after the embedding's journal entry, resumed: the same bytes
    auto o2 = options(d / "r.safetensors", plan);
    o2.interrupt_after_layer = 0;
    EXPECT_THROW(quant::quantize(o2), Error);
    ASSERT_TRUE(fs::exists(d / "r.safetensors.journal/embedding.safetensors"));
    o2.interrupt_after_layer = -1;
    o2.resume = true;
    quant::quantize(o2);
    EXPECT_EQ(test::slurp(d / "e.safetensors"), test::slurp(d / "r.safetensors"));
    fs::remove_all(d);
}

TEST(Embedding, AGlobWithoutEmbedLeavesItAsItIs) {
    REQUIRE_DATA_AT(kModel);
    const fs::path d = test::scratch_dir("cortiq_emb_", "glob");
    const std::string plan = write_plan(d / "plan.json", R"({"*.weight": 1.5})");
    const auto rep = quant::quantize(options(d / "g.safetensors", plan));
    EXPECT_EQ(rep.tensors.size(), 5u * 7u);
    EXPECT_EQ(rep.embed_params, 0);
    const auto m = model::Model::load((d / "g.safetensors").string());
    EXPECT_FALSE(m.embedding().packed());
    fs::remove_all(d);
}
