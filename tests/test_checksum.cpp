// Checksums of a cortiq file (io/checksum.hpp): stories260K quantized once;
// the intact file verifies; one flipped bit in a payload's signs, in its
// scales, in a float tensor or in the header is named (file and tensor) by the
// load, by `cortiq ppl` and by `cortiq inspect`, which exit non-zero, and
// --no-verify loads it anyway; single-bit flips across the header are caught;
// a file without checksums (as written before them) still loads; a damaged
// journal entry is refused at resume.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "blr/layout.hpp"
#include "blr/sign.hpp"
#include "cli_run.hpp"
#include "core/error.hpp"
#include "io/checksum.hpp"
#include "io/safetensors.hpp"
#include "model/llama.hpp"
#include "quantize/journal.hpp"
#include "quantize/quantize.hpp"
#include "test_files.hpp"

using namespace cortiq;
using cortiq::test::run_cli;
namespace fs = std::filesystem;

namespace {

const std::string kData = CORTIQ_SHARED_DATA;
const std::string kModel = kData + "/models/stories260K";
const std::string kCalib = kData + "/text/tinystories-calib.txt";
const std::string kText = kData + "/text/tinystories-valid.txt";

// Flips bit `bit` of byte `at` of the file in place (twice restores it).
void flip_bit(const fs::path& p, uint64_t at, int bit) {
    const int fd = ::open(p.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << p;
    uint8_t b = 0;
    ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(at)), 1);
    b ^= static_cast<uint8_t>(1u << bit);
    ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(at)), 1);
    ::close(fd);
}

// The message of the Error that `f` throws ("" if none).
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// One damage to try: where in the file, and the tensor it hits ("" for the header).
struct Damage {
    std::string what;
    uint64_t at;
    int bit;
    std::string tensor;
};

}  // namespace

class Checksum : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (!fs::exists(kModel)) return;
        dir_ = test::scratch_dir("cortiq_sum_", "suite");
        quant::QuantizeOptions o;
        o.model_dir = kModel;
        o.calib_paths = {kCalib};
        o.out_path = (dir_ / "a.safetensors").string();
        o.bpw = 1.0;
        o.calib.samples = 6;
        o.calib.seqlen = 96;
        o.enc.itq_iters = 20;
        o.progress = false;
        o.verbose = false;
        quant::quantize(o);
    }
    static void TearDownTestSuite() {
        if (!dir_.empty()) fs::remove_all(dir_);
    }
    void SetUp() override {
        if (!fs::exists(kModel)) GTEST_SKIP() << "no " << kModel;
    }
    // A fresh copy of the quantized file, to damage.
    static fs::path copy(const char* name) {
        const fs::path p = dir_ / name;
        fs::copy_file(dir_ / "a.safetensors", p, fs::copy_options::overwrite_existing);
        return p;
    }
    static fs::path original() { return dir_ / "a.safetensors"; }

    // One bit in each kind of content: a BLR payload's signs and scales, a
    // float tensor, a metadata value of the header.
    static std::vector<Damage> damages() {
        const auto f = io::SafetensorsFile::open(original().string());
        std::vector<Damage> out;
        for (const auto& t : f.tensors()) {
            if (t.dtype != io::DType::U8) continue;
            const auto s = blr::payload_shape(f.bytes(t), t.name);
            if (s.paths == 0) continue;
            const uint64_t base = f.data_offset() + t.begin;
            const auto m = static_cast<uint64_t>(s.m), n = static_cast<uint64_t>(s.n),
                       r = static_cast<uint64_t>(s.rank);
            out.push_back({"BLR sign bit", base + blr::off_signs(m, n, r, s.paths), 0, t.name});
            // the lowest mantissa bit of h[0] (f16): still a finite scale
            out.push_back(
                {"BLR scale", base + blr::off_scales(m, n, r, 0) + blr::off_h(), 0, t.name});
            break;
        }
        const auto& norm = f.info("model.norm.weight");
        out.push_back({"float tensor", f.data_offset() + norm.begin, 0, norm.name});
        // "cortiq-blr" → "bortiq-blr": the header still parses
        const auto h = f.header_bytes();
        const std::string_view hs(reinterpret_cast<const char*>(h.data()), h.size());
        const size_t at = hs.find("\"format\":\"cortiq-blr\"");
        EXPECT_NE(at, std::string_view::npos);
        out.push_back({"header", at + 10, 0, ""});
        return out;
    }

    static fs::path dir_;
};

fs::path Checksum::dir_;

TEST_F(Checksum, AnIntactFileVerifiesAndEveryTensorHashIsItsBytes) {
    const auto f = io::SafetensorsFile::open(original().string());
    const auto c = io::check_checksums(f);
    EXPECT_TRUE(c.present);
    EXPECT_TRUE(c.ok()) << c.message(original().string());
    EXPECT_EQ(c.tensors_checked, static_cast<int64_t>(f.tensors().size()));
    // the recorded hashes are those of the bytes, one per tensor
    const auto rec = nlohmann::json::parse(f.metadata().at(std::string(io::kTensorChecksumsKey)));
    ASSERT_EQ(rec.size(), f.tensors().size());
    for (const auto& t : f.tensors())
        EXPECT_EQ(rec.at(t.name).get<std::string>(), io::hex64(io::xxh3_64(f.bytes(t)))) << t.name;
    EXPECT_NO_THROW(io::verify_checksums(f));
    EXPECT_NO_THROW(model::Model::load(original().string()));
    const auto insp = quant::inspect(original().string());
    EXPECT_TRUE(insp.damage.empty()) << insp.damage;
    EXPECT_NE(insp.text.find("checksums match"), std::string::npos) << insp.text;
    const auto cli = run_cli("inspect " + original().string());
    EXPECT_EQ(cli.code, 0) << cli.out;
}

TEST_F(Checksum, OneFlippedBitIsNamedAtLoadAndByInspect) {
    for (const auto& d : damages()) {
        SCOPED_TRACE(d.what);
        const fs::path p = copy("damaged.safetensors");
        flip_bit(p, d.at, d.bit);
        const std::string named = d.tensor.empty() ? "header" : "'" + d.tensor + "'";
        const std::string e = error_of([&] { model::Model::load(p.string()); });
        EXPECT_NE(e.find(p.string()), std::string::npos) << e;
        EXPECT_NE(e.find(named), std::string::npos) << e;
        EXPECT_NE(e.find("damaged"), std::string::npos) << e;
        // inspect lists the file and names what is damaged, the CLI exits non-zero
        const auto insp = quant::inspect(p.string());
        EXPECT_NE(insp.damage.find(p.string()), std::string::npos) << insp.damage;
        EXPECT_NE(insp.damage.find(named), std::string::npos) << insp.damage;
        EXPECT_NE(insp.text.find("CHECKSUM MISMATCH"), std::string::npos) << insp.text;
        const auto cli = run_cli("inspect " + p.string());
        EXPECT_NE(cli.code, 0) << cli.out;
        EXPECT_NE(cli.out.find(named), std::string::npos) << cli.out;
        // without verification the damaged file loads (each flip keeps it well formed)
        model::LoadOptions lo;
        lo.verify = false;
        EXPECT_NO_THROW(model::Model::load(p.string(), lo));
    }
}

TEST_F(Checksum, PplRefusesADamagedFileAndRunsItWithNoVerify) {
    const auto d = damages().front();  // a payload's sign bit
    const fs::path p = copy("ppl.safetensors");
    flip_bit(p, d.at, d.bit);
    const std::string args = " --text " + kText + " --ctx 64 --max-windows 1 --quiet --threads 1";
    const auto refused = run_cli("ppl " + p.string() + args);
    EXPECT_NE(refused.code, 0) << refused.out;
    EXPECT_NE(refused.out.find("'" + d.tensor + "'"), std::string::npos) << refused.out;
    EXPECT_NE(refused.out.find(p.string()), std::string::npos) << refused.out;
    const auto ran = run_cli("ppl " + p.string() + args + " --no-verify");
    EXPECT_EQ(ran.code, 0) << ran.out;
    const auto gen = run_cli("generate " + p.string() + " --max-tokens 2 --threads 1 --no-verify");
    EXPECT_EQ(gen.code, 0) << gen.out;
}

TEST_F(Checksum, ExportRefusesADamagedFileAndWritesNoFolder) {
    const auto d = damages().front();  // a payload's sign bit
    const fs::path p = copy("export.safetensors");
    flip_bit(p, d.at, d.bit);
    const fs::path out = dir_ / "exported";
    const auto refused = run_cli("export " + p.string() + " " + out.string());
    EXPECT_NE(refused.code, 0) << refused.out;
    EXPECT_NE(refused.out.find("'" + d.tensor + "'"), std::string::npos) << refused.out;
    EXPECT_NE(refused.out.find(p.string()), std::string::npos) << refused.out;
    EXPECT_FALSE(fs::exists(out));
    // the intact file exports
    const auto ran = run_cli("export " + original().string() + " " + out.string());
    EXPECT_EQ(ran.code, 0) << ran.out;
    EXPECT_TRUE(fs::exists(out / "config.json"));
}

TEST_F(Checksum, SingleBitFlipsAcrossTheHeaderAreCaught) {
    const fs::path p = copy("header.safetensors");
    const uint64_t n = io::SafetensorsFile::open(p.string()).data_offset();
    // the 8 length bytes, then about 500 bytes spread over the whole header
    // (an odd stride, so that every bit position is tried), one bit each
    const uint64_t stride = std::max<uint64_t>(1, n / 500) | 1;
    int64_t caught_by_sum = 0, tried = 0;
    for (uint64_t at = 0; at < n; at += at < 8 ? 1 : stride) {
        const int bit = static_cast<int>(at % 8);
        ++tried;
        flip_bit(p, at, bit);
        bool caught = false;
        try {
            const auto f = io::SafetensorsFile::open(p.string());
            const auto c = io::check_checksums(f);
            caught = c.present && !c.ok();
            caught_by_sum += caught;
        } catch (const Error&) {
            caught = true;  // a header that no longer parses or validates
        }
        EXPECT_TRUE(caught) << "byte " << at << " bit " << bit;
        flip_bit(p, at, bit);
    }
    // most flips land in metadata strings, which still parse: the checksum's case
    EXPECT_GT(caught_by_sum, tried / 2);
    EXPECT_TRUE(io::check_checksums(io::SafetensorsFile::open(p.string())).ok());
}

TEST_F(Checksum, AFileWithoutChecksumsLoadsAndInspectSaysSo) {
    // the file as written before checksums: same tensors and metadata, no
    // sums (a writer without set_checksums drops the copied ones)
    const auto f = io::SafetensorsFile::open(original().string());
    io::SafetensorsWriter w;
    for (const auto& t : f.tensors()) w.add(t.name, t.dtype, t.shape, f.bytes(t));
    for (const auto& [k, v] : f.metadata()) w.set_metadata(k, v);
    const fs::path p = dir_ / "old.safetensors";
    w.write(p.string());
    const auto c = io::check_checksums(io::SafetensorsFile::open(p.string()));
    EXPECT_FALSE(c.present);
    EXPECT_TRUE(c.ok());
    EXPECT_NO_THROW(model::Model::load(p.string()));
    const auto insp = quant::inspect(p.string());
    EXPECT_TRUE(insp.damage.empty());
    EXPECT_NE(insp.text.find("no checksums"), std::string::npos) << insp.text;
    EXPECT_EQ(run_cli("inspect " + p.string()).code, 0);
    // one of the two keys alone is damage, not an old file: the header
    // checksum's key renamed in place (same length, still valid JSON)
    const fs::path half = copy("half.safetensors");
    {
        std::string bytes = test::slurp(half);
        const size_t at = bytes.find(std::string(io::kHeaderChecksumKey));
        ASSERT_NE(at, std::string::npos);
        flip_bit(half, at + io::kHeaderChecksumKey.size() - 1, 2);  // ..._xxh3 → ..._xxh7
    }
    const auto hc = io::check_checksums(io::SafetensorsFile::open(half.string()));
    EXPECT_TRUE(hc.present);
    EXPECT_FALSE(hc.ok());
    EXPECT_THROW(model::Model::load(half.string()), Error);
}

TEST_F(Checksum, AResumeRefusesADamagedJournalEntry) {
    // an entry holding one payload of the file and its report
    const auto f = io::SafetensorsFile::open(original().string());
    const io::TensorInfo* t = nullptr;
    for (const auto& x : f.tensors())
        if (x.dtype == io::DType::U8 && !blr::is_sign_payload(f.bytes(x))) t = &x;
    ASSERT_NE(t, nullptr);
    const auto s = blr::payload_shape(f.bytes(*t), t->name);
    const auto reports = nlohmann::json::parse(f.metadata().at("cortiq.tensors"));
    quant::LayerRecord rec;
    const auto b = f.bytes(*t);
    rec.payloads.emplace_back(t->name, std::vector<uint8_t>(b.begin(), b.end()));
    rec.reports.push_back(quant::TensorReport::from_json(t->name, reports.at(t->name)));
    const quant::Journal j((dir_ / "j.safetensors").string(), {{"run", 1}}, false, true);
    j.save(0, rec);
    const std::vector<quant::JournalTensor> want = {{t->name, s.m, s.n}};
    EXPECT_TRUE(j.load(0, want).has_value());
    // one sign bit of the saved payload
    const fs::path entry = j.file_of(0);
    const auto e = io::SafetensorsFile::open(entry.string());
    const auto m = static_cast<uint64_t>(s.m), n = static_cast<uint64_t>(s.n),
               r = static_cast<uint64_t>(s.rank);
    flip_bit(entry, e.data_offset() + e.info(t->name).begin + blr::off_signs(m, n, r, s.paths), 3);
    const std::string err = error_of([&] { j.load(0, want); });
    EXPECT_NE(err.find(entry.string()), std::string::npos) << err;
    EXPECT_NE(err.find("'" + t->name + "'"), std::string::npos) << err;
    j.remove();
}
