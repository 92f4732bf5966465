// End-to-end bounds on what quantize produces, that hold on any machine
// because they compare within one run (tests/quality.hpp): every tensor of
// stories260K's compressed file has, against the true held-out Grams of its
// input, the held-out error the run reports and an error below rtn-sign's on
// those Grams at no more bytes. A run whose encoder was fed another layer's
// Grams of the same shape (the testing hook
// QuantizeOptions::test_grams_of_previous_layer) misses these bounds.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "quality.hpp"
#include "test_files.hpp"

using namespace cortiq;
namespace fs = std::filesystem;

namespace {

const std::string kData = CORTIQ_SHARED_DATA;
const std::string kModel = kData + "/models/stories260K";
const std::string kCalib = kData + "/text/tinystories-calib.txt";

// Plain sequential calibration (tensor_quality recomputes its inputs): 16
// windows of 128 tokens, 2 of them held out; each tensor at rtn-sign's bits
// per weight (1.37 to 1.88 for these shapes). At 1 bpw NVG's error is above
// rtn-sign's (at 1.56 to 1.88 bpw) on k_proj, v_proj, gate/up_proj of most
// layers (v_proj 0.89 against 0.60), so no bound at unequal bytes is sound.
// Measured at equal bytes: see kStoriesSlack (tests/quality.hpp).
quant::QuantizeOptions plain_options(const fs::path& out) {
    quant::QuantizeOptions o;
    o.model_dir = kModel;
    o.calib_paths = {kCalib};
    o.out_path = out.string();
    o.plan_path = (out.parent_path() / "plan.json").string();
    test::write_rtn_budget_plan(kModel, o.plan_path);
    o.calib.samples = 16;
    o.calib.seqlen = 128;
    o.match_original = false;
    o.progress = false;
    o.verbose = false;
    o.force = true;
    return o;
}

void print(const std::vector<test::TensorQuality>& qs, const char* label) {
    for (const auto& q : qs)
        std::printf("[%s] %-36s reported %.5f true %.5f rtn-sign %.5f (%lld / %lld bits)\n", label,
                    q.name.c_str(), q.err_reported, q.err_true, q.err_rtn,
                    static_cast<long long>(q.bits), static_cast<long long>(q.bits_rtn));
}

}  // namespace

TEST(QuantizeQuality, EveryTensorBeatsRtnSignOnItsTrueHeldOutGrams) {
    if (!fs::exists(kModel)) GTEST_SKIP() << "no " << kModel;
    const fs::path d = test::scratch_dir("cortiq_qq_", "real");
    const auto o = plain_options(d / "a.safetensors");
    const auto rep = quant::quantize(o);
    ASSERT_EQ(rep.tensors.size(), 35u);
    EXPECT_GT(rep.tensors[0].bits, 64 * 64);  // the plan applied (rtn-sign: 6400 bits)
    const auto qs = test::tensor_quality(o, rep);
    print(qs, "real");
    for (const auto& miss : test::quality_misses(qs, test::kStoriesSlack)) ADD_FAILURE() << miss;
    fs::remove_all(d);
}

// The same run with every layer but the first encoded against the Grams of
// the layer before it: the reported errors are then those against the wrong
// Grams, and the payloads fit the wrong inputs. Measured at 1 bpw: 27 of the
// 28 tensors it changed report an error off the true one by more than 1e-3
// (o_proj of layer 1: 0.353 reported, 0.901 true, real run 0.320), and
// several lose to rtn-sign (down_proj of layer 1: 0.777 against 0.632).
TEST(QuantizeQuality, GramsOfAnotherLayerMissTheBounds) {
    if (!fs::exists(kModel)) GTEST_SKIP() << "no " << kModel;
    const fs::path d = test::scratch_dir("cortiq_qq_", "swapped");
    auto o = plain_options(d / "s.safetensors");
    o.test_grams_of_previous_layer = true;
    const auto rep = quant::quantize(o);
    const auto qs = test::tensor_quality(o, rep);
    print(qs, "swapped");
    const auto misses = test::quality_misses(qs, test::kStoriesSlack);
    for (const auto& m : misses) std::printf("miss: %s\n", m.c_str());
    EXPECT_FALSE(misses.empty());
    fs::remove_all(d);
}
