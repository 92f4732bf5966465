// The calibration set (several texts, random and sampled windows) and the
// defaults quantize resolves from the model and the device: --samples,
// --calib-generated, --kd-random, --kd-lr-signs, --kd-min-gain, the hybrid
// plan and epochs, and the check that a distillation's sign state fits the GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "calib/calib.hpp"
#include "calib/generated.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "model/generate.hpp"
#include "model/llama.hpp"
#include "quantize/quantize.hpp"
#include "quantize/steps.hpp"
#include "require.hpp"
#include "test_files.hpp"

using namespace cortiq;

namespace {

const std::string kModel = cortiq::test::shared_data().string() + "/models/stories260K";

}  // namespace

// Several calibration texts: equal shares of the windows, each text split into
// fit and held-out windows on its own (so both sets see every text), one text
// exactly the single-text set, and a short text named in the error.
TEST(CalibSet, SeveralTextsGiveEqualSharesToFitAndHeldOut) {
    // token ids that say which text and where: text t holds 1000·t + position
    std::vector<std::vector<int32_t>> ids(3);
    for (int t = 0; t < 3; ++t)
        for (int i = 0; i < 900 + 300 * t; ++i) ids[t].push_back(1000 * (t + 1) + i % 1000);
    calib::CalibOptions o;
    o.samples = 25;
    o.seqlen = 16;
    o.holdout = 0.25;
    const auto cs = calib::make_calib_set(ids, o, {"a", "b", "c"});
    ASSERT_EQ(static_cast<int64_t>(cs.fit.size() + cs.sel.size()), o.samples);
    std::array<int, 3> fit{}, sel{};
    for (const auto& w : cs.fit) ++fit[w[0] / 1000 - 1];
    for (const auto& w : cs.sel) ++sel[w[0] / 1000 - 1];
    for (int t = 0; t < 3; ++t) {
        EXPECT_EQ(fit[t] + sel[t], t == 0 ? 9 : 8) << "text " << t;  // 25 = 9 + 8 + 8
        EXPECT_GE(sel[t], 1) << "text " << t;
        EXPECT_GE(fit[t], 1) << "text " << t;
    }
    // interleaved text by text
    EXPECT_EQ(cs.fit[0][0] / 1000, 1);
    EXPECT_EQ(cs.fit[1][0] / 1000, 2);
    EXPECT_EQ(cs.fit[2][0] / 1000, 3);
    EXPECT_EQ(cs.text_tokens, 900 + 1200 + 1500);
    // each text's windows are the single-text set of its share
    calib::CalibOptions o2 = o;
    o2.samples = 8;
    const auto b = calib::make_calib_set(ids[1], o2, "b");
    std::vector<std::vector<int32_t>> bfit;
    for (const auto& w : cs.fit)
        if (w[0] / 1000 == 2) bfit.push_back(w);
    EXPECT_EQ(bfit, b.fit);
    // one text: the single-text set
    const auto one = calib::make_calib_set(std::vector<std::vector<int32_t>>{ids[2]}, o, {"c"});
    const auto single = calib::make_calib_set(ids[2], o, "c");
    EXPECT_EQ(one.fit, single.fit);
    EXPECT_EQ(one.sel, single.sel);
    // too short: the error names the text
    o.samples = 30;
    o.seqlen = 100;
    try {
        calib::make_calib_set(ids, o, {"a.txt", "b.txt", "c.txt"});
        ADD_FAILURE() << "a text too short was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("a.txt"), std::string::npos) << e.what();
    }
    o.samples = 5;  // fewer than two windows per text
    EXPECT_THROW(calib::make_calib_set(ids, o, {"a", "b", "c"}), Error);
}

// --calib-random: round(R·|set|) windows of the set's length join the fit and
// the held-out windows after the text's, ids inside the vocabulary, the same
// windows for the same seed, different ones for the two sets.
TEST(CalibSet, RandomWindowsJoinBothSetsReproducibly) {
    std::vector<int32_t> ids(2000);
    for (int i = 0; i < 2000; ++i) ids[i] = i % 50;
    calib::CalibOptions o;
    o.samples = 12;
    o.seqlen = 32;
    o.holdout = 0.25;
    const auto text = calib::make_calib_set(ids, o, "t");
    for (double r : {0.0, 0.5, 1.0, 2.5}) {
        auto cs = text;
        calib::add_random_windows(cs, r, 1000, 7);
        for (auto [set, base] : {std::pair{&cs.fit, &text.fit}, {&cs.sel, &text.sel}}) {
            const auto extra =
                static_cast<size_t>(std::llround(r * static_cast<double>(base->size())));
            ASSERT_EQ(set->size(), base->size() + extra) << "r " << r;
            EXPECT_TRUE(std::equal(base->begin(), base->end(), set->begin()));  // text first
            for (size_t w = base->size(); w < set->size(); ++w) {
                ASSERT_EQ((*set)[w].size(), static_cast<size_t>(o.seqlen));
                for (int32_t v : (*set)[w]) ASSERT_TRUE(v >= 0 && v < 1000) << v;
            }
        }
        auto again = text;
        calib::add_random_windows(again, r, 1000, 7);
        EXPECT_EQ(again.fit, cs.fit);
        EXPECT_EQ(again.sel, cs.sel);
        if (r >= 1) EXPECT_NE(cs.fit.back(), cs.sel.back());
    }
    auto cs = text;
    EXPECT_THROW(calib::add_random_windows(cs, -1.0, 1000, 7), Error);
    EXPECT_THROW(calib::add_random_windows(cs, 1.0, 0, 7), Error);
}

// --calib-generated: round(R·|set|) windows join each set after the text's;
// each is the start token then the model's own samples (window i: exactly
// model::generate from the start token with seed + i), the same windows with
// one thread or two, different windows for different seeds and sets.
TEST(CalibSet, GeneratedWindowsAreTheModelsOwnSamplesReproducibly) {
    REQUIRE_DATA_AT(kModel);
    const auto m = model::Model::load(kModel);
    std::vector<int32_t> ids(3000);
    for (int i = 0; i < 3000; ++i) ids[i] = 3 + i % 400;
    calib::CalibOptions o;
    o.samples = 8;
    o.seqlen = 40;
    o.holdout = 0.25;
    const auto text = calib::make_calib_set(ids, o, "t");
    for (double r : {0.0, 0.5, 1.0}) {
        auto cs = text;
        std::atomic<int64_t> heard{0};  // the progress callback, from the sampling threads
        const int64_t added =
            calib::add_generated_windows(cs, r, m, 1, 99, [&](int64_t k) { heard += k; });
        EXPECT_EQ(heard.load(), added) << "r " << r;
        EXPECT_EQ(added, calib::windows_to_add(static_cast<int64_t>(text.fit.size()), r) +
                             calib::windows_to_add(static_cast<int64_t>(text.sel.size()), r));
        int64_t expect = 0;
        for (auto [set, base] : {std::pair{&cs.fit, &text.fit}, {&cs.sel, &text.sel}}) {
            const auto extra =
                static_cast<size_t>(std::llround(r * static_cast<double>(base->size())));
            expect += static_cast<int64_t>(extra);
            ASSERT_EQ(set->size(), base->size() + extra) << "r " << r;
            EXPECT_TRUE(std::equal(base->begin(), base->end(), set->begin()));  // text first
            for (size_t w = base->size(); w < set->size(); ++w) {
                ASSERT_EQ((*set)[w].size(), static_cast<size_t>(o.seqlen));
                EXPECT_EQ((*set)[w][0], 1);
                for (int32_t v : (*set)[w]) ASSERT_TRUE(v >= 0 && v < m.config().vocab_size);
            }
        }
        EXPECT_EQ(added, expect);
    }
    set_num_threads(1);
    const auto one = calib::generated_windows(m, 3, 40, 1, 1.0, 5);
    set_num_threads(2);
    const auto two = calib::generated_windows(m, 3, 40, 1, 1.0, 5);
    set_num_threads(0);
    EXPECT_EQ(one, two);
    EXPECT_NE(one[0], one[1]);
    model::GenerateOptions g;
    g.max_tokens = 39;
    g.temperature = 1.0;
    g.seed = 6;  // window 1
    const std::vector<int32_t> start = {1};
    const auto direct = model::generate(m, start, g);
    EXPECT_TRUE(std::equal(direct.begin(), direct.end(), one[1].begin() + 1));
    auto cs = text;
    EXPECT_THROW(calib::add_generated_windows(cs, -1.0, m, 1, 7), Error);
    EXPECT_THROW(calib::generated_windows(m, 1, 40, -1, 1.0, 7), Error);
    EXPECT_THROW(calib::generated_windows(m, 1, 1, 1, 1.0, 7), Error);
}

// --calib-generated auto: 0.5 when tuning a model small enough to sample from
// on the CPU (1.0 for a hybrid one), else 0; a value given is kept.
TEST(CalibSet, GeneratedWindowsAutoFollowsTuningAndModelSize) {
    quant::QuantizeOptions o;
    o.verbose = false;
    o.calib_generated = quant::kCalibGeneratedAuto;
    const int64_t small = 6'800'000, big = quant::kCalibGeneratedAutoParams + 1;
    for (const char* mode : {"block", "block+kd", "kd"}) {
        o.tune_mode = mode;
        EXPECT_EQ(quant::resolve_calib_generated(o, small), 0.5) << mode;
        EXPECT_EQ(quant::resolve_calib_generated(o, small, true), quant::kCalibGeneratedHybrid)
            << mode;
        EXPECT_EQ(quant::resolve_calib_generated(o, big), 0.0) << mode;
        EXPECT_EQ(quant::resolve_calib_generated(o, big, true), 0.0) << mode;
    }
    o.tune_mode = "none";
    EXPECT_EQ(quant::resolve_calib_generated(o, small), 0.0);
    EXPECT_EQ(quant::resolve_calib_generated(o, small, true), 0.0);
    o.calib_generated = 2.0;
    EXPECT_EQ(quant::resolve_calib_generated(o, big), 2.0);
    o.calib_generated = 0.0;
    o.tune_mode = "block";
    EXPECT_EQ(quant::resolve_calib_generated(o, small), 0.0);
    EXPECT_EQ(quant::resolve_calib_generated(o, small, true), 0.0);
}

// --kd-random auto: 1 random-token window per fit window, none when sampled
// windows are in the calibration set; a value given is kept either way. The
// library's default is auto.
TEST(CalibSet, KdRandomAutoFollowsSampledWindows) {
    quant::QuantizeOptions o;
    EXPECT_EQ(o.kd_random, quant::kKdRandomAuto);
    EXPECT_EQ(quant::resolve_kd_random(o, 0.0), 1.0);
    EXPECT_EQ(quant::resolve_kd_random(o, 0.5), 0.0);
    o.kd_random = 2.0;
    EXPECT_EQ(quant::resolve_kd_random(o, 0.5), 2.0);
    o.kd_random = 0.0;
    EXPECT_EQ(quant::resolve_kd_random(o, 0.0), 0.0);
}

// --kd-lr-signs auto: the signs move in distillation for a model of at most
// 100 M parameters and stay fixed above (their latents would not fit); a
// step given is kept either way. The library's default is auto.
TEST(CalibSet, KdLrSignsAutoFollowsTheModelSize) {
    quant::QuantizeOptions o;
    EXPECT_EQ(o.kd.lr_signs, quant::kKdLrSignsAuto);
    EXPECT_EQ(quant::resolve_kd_lr_signs(o, quant::kCalibGeneratedAutoParams),
              quant::kKdLrSignsSmall);
    EXPECT_EQ(quant::resolve_kd_lr_signs(o, quant::kCalibGeneratedAutoParams + 1), 0.0);
    o.kd.lr_signs = 3e-4;
    EXPECT_EQ(quant::resolve_kd_lr_signs(o, int64_t{7'000'000'000}), 3e-4);
    o.kd.lr_signs = 0.0;
    EXPECT_EQ(quant::resolve_kd_lr_signs(o, 1000), 0.0);
}

// --kd-min-gain auto: every gain resets the patience for a model of at most
// 100 M parameters (the schedule its measurements were made with), a gain
// above kKdMinGainLarge does above; a fraction given is kept either way.
TEST(CalibSet, KdMinGainAutoFollowsTheModelSize) {
    quant::QuantizeOptions o;
    EXPECT_EQ(o.kd.min_gain, quant::kKdMinGainAuto);
    EXPECT_EQ(o.tune.min_gain, 0.0);  // block tuning: every gain counts
    EXPECT_EQ(quant::resolve_kd_min_gain(o, quant::kCalibGeneratedAutoParams), 0.0);
    EXPECT_EQ(quant::resolve_kd_min_gain(o, quant::kCalibGeneratedAutoParams + 1),
              quant::kKdMinGainLarge);
    EXPECT_GT(quant::kKdMinGainLarge, 0.0);
    o.kd.min_gain = 0.0;
    EXPECT_EQ(quant::resolve_kd_min_gain(o, int64_t{7'000'000'000}), 0.0);
    o.kd.min_gain = 0.02;
    EXPECT_EQ(quant::resolve_kd_min_gain(o, 1000), 0.02);
}

// Moving signs in a GPU distillation hold 20 bytes a sign (about bpw signs
// a weight): a run whose signs alone pass the GPU's memory is refused before
// any work, naming the flag; fixed signs, or an unknown memory, are not.
TEST(CalibSet, KdSignMemoryIsCheckedBeforeAnyWork) {
    const int64_t weights_7b = 6'476'005'376, gb80 = 80'000'000'000;
    try {
        quant::check_kd_sign_memory(1e-4, weights_7b, 1.0, gb80);
        ADD_FAILURE() << "130 GB of sign state passed an 80 GB GPU";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--kd-lr-signs"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(quant::check_kd_sign_memory(0.0, weights_7b, 1.0, gb80));
    EXPECT_NO_THROW(quant::check_kd_sign_memory(1e-4, weights_7b, 1.0, 0));
    // the bound itself: 20 bytes × bpw × weights
    EXPECT_NO_THROW(quant::check_kd_sign_memory(1e-4, 1'000'000'000, 2.0, 40'000'000'000));
    EXPECT_THROW(quant::check_kd_sign_memory(1e-4, 1'000'000'001, 2.0, 40'000'000'000), Error);
}

// --samples auto: 192 windows when tuning a model of at most 100 M
// parameters (256 for a hybrid one), 128 otherwise; a count given is kept.
TEST(CalibSet, SamplesAutoFollowsTuning) {
    quant::QuantizeOptions o;
    o.calib.samples = quant::kSamplesAuto;
    o.tune_mode = "block+kd";
    EXPECT_EQ(quant::resolve_samples(o, 6'000'000), quant::kSamplesTuned);
    EXPECT_EQ(quant::resolve_samples(o, 6'000'000, true), quant::kSamplesTunedHybrid);
    EXPECT_EQ(quant::resolve_samples(o, 7'000'000'000), calib::CalibOptions{}.samples);
    EXPECT_EQ(quant::resolve_samples(o, 7'000'000'000, true), calib::CalibOptions{}.samples);
    o.tune_mode = "none";
    EXPECT_EQ(quant::resolve_samples(o, 6'000'000), calib::CalibOptions{}.samples);
    EXPECT_EQ(quant::resolve_samples(o, 6'000'000, true), calib::CalibOptions{}.samples);
    o.calib.samples = 40;
    EXPECT_EQ(quant::resolve_samples(o, 6'000'000), 40);
    o.tune_mode = "block";
    EXPECT_EQ(quant::resolve_samples(o, 6'000'000), 40);
}

// The plan and block tuning's epochs by default (the command line's): --plan
// auto and 8 epochs when tuning a hybrid model of at most 100 M parameters,
// the uniform plan and 4 epochs otherwise; a plan or a count given is kept.
TEST(CalibSet, HybridPlanAndEpochsFollowTuningAndModelSize) {
    quant::QuantizeOptions o;
    o.plan_auto_default = true;
    o.tune.epochs = quant::kTuneEpochsAuto;
    o.tune_mode = "block+kd";
    const int plain = tune::TuneOptions{}.epochs;
    EXPECT_TRUE(quant::resolve_plan_auto(o, 6'000'000, true));
    EXPECT_EQ(quant::resolve_tune_epochs(o, 6'000'000, true), quant::kTuneEpochsHybrid);
    EXPECT_FALSE(quant::resolve_plan_auto(o, 6'000'000, false));
    EXPECT_EQ(quant::resolve_tune_epochs(o, 6'000'000, false), plain);
    EXPECT_FALSE(quant::resolve_plan_auto(o, 800'000'000, true));
    EXPECT_EQ(quant::resolve_tune_epochs(o, 800'000'000, true), plain);
    // the steps on the log-scales: set by hand, or auto (the command line's)
    const double tune_lr = tune::TuneOptions{}.lr_scales,
                 kd_lr = quant::QuantizeOptions{}.kd.lr_scales;
    EXPECT_EQ(quant::resolve_tune_lr(o, 6'000'000, true), tune_lr);
    EXPECT_EQ(quant::resolve_kd_lr(o, 6'000'000, true), kd_lr);
    o.tune.lr_scales = quant::kLrAuto;
    o.kd.lr_scales = quant::kLrAuto;
    EXPECT_EQ(quant::resolve_tune_lr(o, 6'000'000, true), quant::kTuneLrHybrid);
    EXPECT_EQ(quant::resolve_kd_lr(o, 6'000'000, true), quant::kKdLrHybrid);
    EXPECT_EQ(quant::resolve_tune_lr(o, 6'000'000, false), tune_lr);
    EXPECT_EQ(quant::resolve_kd_lr(o, 6'000'000, false), kd_lr);
    EXPECT_EQ(quant::resolve_tune_lr(o, 800'000'000, true), tune_lr);
    EXPECT_EQ(quant::resolve_kd_lr(o, 800'000'000, true), kd_lr);
    // block tuning's schedule: as set, or auto (the command line's)
    using tune::LrSchedule;
    EXPECT_EQ(quant::resolve_tune_lr_schedule(o, 6'000'000, true), LrSchedule::constant);
    o.tune.lr_schedule = LrSchedule::cosine;
    EXPECT_EQ(quant::resolve_tune_lr_schedule(o, 6'000'000, false), LrSchedule::cosine);
    o.tune_lr_schedule_auto = true;
    EXPECT_EQ(quant::resolve_tune_lr_schedule(o, 6'000'000, true), quant::kTuneLrScheduleHybrid);
    EXPECT_EQ(quant::resolve_tune_lr_schedule(o, 6'000'000, false), LrSchedule::constant);
    EXPECT_EQ(quant::resolve_tune_lr_schedule(o, 800'000'000, true), LrSchedule::constant);
    o.tune_mode = "none";
    EXPECT_FALSE(quant::resolve_plan_auto(o, 6'000'000, true));
    o.tune_mode = "block";
    o.plan_path = "plan.json";  // a plan of one's own
    EXPECT_FALSE(quant::resolve_plan_auto(o, 6'000'000, true));
    o.plan_path.clear();
    o.enc.method = encode::Method::rtn_sign;  // no rank to plan
    EXPECT_FALSE(quant::resolve_plan_auto(o, 6'000'000, true));
    o.enc.method = encode::Method::nvg;
    o.file_bpw = 1.5;  // --file-bpw plans the whole file (plan_auto set by the caller)
    EXPECT_FALSE(quant::resolve_plan_auto(o, 6'000'000, true));
    o.file_bpw = 0;
    o.plan_auto_default = false;  // --plan uniform
    EXPECT_FALSE(quant::resolve_plan_auto(o, 6'000'000, true));
    o.plan_auto = true;  // --plan auto
    EXPECT_TRUE(quant::resolve_plan_auto(o, 6'000'000, false));
    o.tune.epochs = 3;
    EXPECT_EQ(quant::resolve_tune_epochs(o, 6'000'000, true), 3);
}
