// `cortiq bench` end to end: the report on a synthetic layer, and corrupt
// inputs giving one clear error line and a non-zero exit, never a crash.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>

#include "cli_run.hpp"
#include "encode/bench.hpp"
#include "encode/dispatch.hpp"
#include "io/safetensors.hpp"

using namespace cortiq;
using cortiq::test::CliRun;
using cortiq::test::run_cli;
namespace fs = std::filesystem;

namespace {

fs::path tmp_dir() {
    fs::path d = fs::temp_directory_path() / ("cortiq_cli_bench_" + std::to_string(getpid()));
    fs::create_directories(d);
    return d;
}

void write_input(const fs::path& path, const MatF& w, const MatF& hf, const MatF* hs,
                 bool drop_sel = false) {
    io::SafetensorsWriter wr;
    wr.add_f32("W", w);
    wr.add_f32("H_fit", hf);
    if (!drop_sel) wr.add_f32("H_sel", hs ? *hs : hf);
    wr.write(path.string());
}

void expect_one_line_error(const CliRun& r, const std::string& needle) {
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("cortiq: error:"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

}  // namespace

TEST(CliBench, PrintsReportProfileAndTable) {
    const CliRun r = run_cli("bench --m 48 --n 96 --bpw 1.0 --threads 1");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("pick P"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("profile: "), std::string::npos);
    for (const char* m : {"nvg ", "nvg-noknots", "svid", "rtn-sign", "sel_rel"})
        EXPECT_NE(r.out.find(m), std::string::npos) << m;
    const CliRun j = run_cli("bench --m 32 --n 64 --bpw 1.0 --json --methods nvg,svid");
    ASSERT_EQ(j.code, 0) << j.out;
    const auto js = nlohmann::json::parse(j.out);
    EXPECT_LT(js["methods"]["nvg"]["sel_rel"].get<double>(),
              js["methods"]["svid"]["sel_rel"].get<double>());
}

// --gptq-passes reaches the encoder: fewer passes of the column search
TEST(CliBench, GptqPassesBoundTheColumnSearch) {
    auto passes = [](const std::string& out) -> long long {
        std::smatch m;
        if (!std::regex_search(out, m, std::regex(R"(gptq_v\.passes [^|]* n=([0-9]+))"))) return -1;
        return std::stoll(m[1].str());
    };
    const CliRun all = run_cli("bench --m 32 --n 64 --methods nvg --threads 1");
    const CliRun one = run_cli("bench --m 32 --n 64 --methods nvg --threads 1 --gptq-passes 1");
    ASSERT_EQ(all.code, 0) << all.out;
    ASSERT_EQ(one.code, 0) << one.out;
    ASSERT_GT(passes(one.out), 0) << one.out;
    EXPECT_LT(passes(one.out), passes(all.out)) << one.out << all.out;
    EXPECT_NE(run_cli("bench --m 32 --n 64 --gptq-passes 0").code, 0);
}

TEST(CliBench, SavedInputRoundTrips) {
    const fs::path d = tmp_dir();
    const CliRun r = run_cli("bench --m 24 --n 40 --bpw 2 --methods svid --save " +
                             (d / "in.safetensors").string());
    ASSERT_EQ(r.code, 0) << r.out;
    const auto in = encode::bench_input_file((d / "in.safetensors").string());
    EXPECT_EQ(in.w.rows(), 24);
    EXPECT_EQ(in.h_sel.cols(), 40);
    const CliRun again =
        run_cli("bench --weight " + (d / "in.safetensors").string() + " --bpw 2 --methods svid");
    EXPECT_EQ(again.code, 0) << again.out;
    fs::remove_all(d);
}

TEST(CliBench, CorruptInputsGiveOneClearError) {
    const fs::path d = tmp_dir();
    auto s = encode::bench_input_synthetic(8, 16, 3);
    const MatF w = s.w.cast<float>(), hf = s.h_fit.cast<float>(), hs = s.h_sel.cast<float>();
    write_input(d / "missing.safetensors", w, hf, nullptr, /*drop_sel=*/true);
    expect_one_line_error(run_cli("bench --weight " + (d / "missing.safetensors").string()),
                          "H_sel");
    write_input(d / "shape.safetensors", w, hf, &hf);
    MatF small(15, 15);
    write_input(d / "shape.safetensors", w, hf, &small);
    expect_one_line_error(run_cli("bench --weight " + (d / "shape.safetensors").string()),
                          "Gram is 15x15");
    MatF wn = w;
    wn(2, 3) = NAN;
    write_input(d / "nan.safetensors", wn, hf, &hs);
    expect_one_line_error(run_cli("bench --weight " + (d / "nan.safetensors").string()),
                          "non-finite");
    MatF neg = hf;
    for (auto& v : neg.vec()) v = -v;
    for (int i = 0; i < 16; ++i) neg(i, i) = -neg(i, i) * 0.01f;
    write_input(d / "indef.safetensors", w, neg, &hs);
    expect_one_line_error(run_cli("bench --weight " + (d / "indef.safetensors").string()),
                          "positive definite");
    MatF asym = hf;
    asym(0, 5) += 10.0f;
    write_input(d / "asym.safetensors", w, asym, &hs);
    expect_one_line_error(run_cli("bench --weight " + (d / "asym.safetensors").string()),
                          "symmetric");
    // truncated file
    {
        const auto full = fs::file_size(d / "asym.safetensors");
        fs::copy_file(d / "asym.safetensors", d / "trunc.safetensors");
        fs::resize_file(d / "trunc.safetensors", full / 2);
    }
    const CliRun t = run_cli("bench --weight " + (d / "trunc.safetensors").string());
    EXPECT_EQ(t.code, 1) << t.out;
    EXPECT_NE(t.out.find("trunc.safetensors"), std::string::npos) << t.out;
    expect_one_line_error(run_cli("bench --weight " + (d / "nope.safetensors").string()),
                          "nope.safetensors");
    fs::remove_all(d);
}

TEST(CliBench, GpuWithoutGpuSaysSoAndFails) {
    if (encode::gpu_available()) GTEST_SKIP() << "a GPU is visible";
    const CliRun r = run_cli("bench --m 16 --n 32 --device gpu");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("gpu"), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}
