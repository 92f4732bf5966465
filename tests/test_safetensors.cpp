// Safetensors reader/writer: round trip, layout, sharded checkpoints, and
// corrupt files rejected with the file and tensor named.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "io/safetensors.hpp"
#include "require.hpp"

namespace fs = std::filesystem;
using namespace cortiq;
using namespace cortiq::io;

namespace {

// A fresh temporary folder per test, removed afterwards.
class TempDir {
  public:
    TempDir() {
        path_ = fs::temp_directory_path() /
                fmt::format("cortiq_st_{}_{}", ::getpid(),
                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    ~TempDir() { fs::remove_all(path_); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }
    const fs::path& path() const { return path_; }

  private:
    fs::path path_;
};

std::vector<uint8_t> bytes_of(const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

// Writes a raw safetensors file: 8-byte length, header text, data.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes,
               int64_t length_override = -1) {
    std::ofstream out(path, std::ios::binary);
    const uint64_t n =
        length_override >= 0 ? static_cast<uint64_t>(length_override) : header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << header;
    out << std::string(data_bytes, '\0');
}

// Expects opening `path` to throw an Error whose message contains every
// needle.
void expect_rejected(const std::string& path, std::vector<std::string> needles) {
    try {
        SafetensorsFile::open(path);
        FAIL() << "accepted a corrupt file: " << path;
    } catch (const Error& e) {
        const std::string msg = e.what();
        needles.push_back(path);
        for (const auto& n : needles)
            EXPECT_NE(msg.find(n), std::string::npos) << "message lacks '" << n << "': " << msg;
    }
}

}  // namespace

TEST(Safetensors, RoundTrip) {
    TempDir dir;
    SafetensorsWriter w;
    MatF a(3, 5);
    for (int64_t i = 0; i < a.size(); ++i) a.data()[i] = 0.25f * static_cast<float>(i) - 1.0f;
    w.add_f32("a", a);
    std::vector<uint8_t> odd = {1, 2, 3};  // 3 bytes: forces the alignment ordering
    w.add("odd", DType::U8, {3}, odd);
    std::vector<uint16_t> h = {float_to_half(1.5f), float_to_half(-2.0f)};
    w.add("h", DType::F16, {2}, std::span(reinterpret_cast<const uint8_t*>(h.data()), 4));
    std::vector<uint16_t> bf = {float_to_bf16(3.0f), float_to_bf16(-0.5f), float_to_bf16(7.0f)};
    w.add("bf", DType::BF16, {1, 3}, std::span(reinterpret_cast<const uint8_t*>(bf.data()), 6));
    std::vector<int64_t> i64 = {-5, 1ll << 40};
    w.add("i64", DType::I64, {2}, std::span(reinterpret_cast<const uint8_t*>(i64.data()), 16));
    std::vector<uint8_t> payload(64);
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7);
    w.add("payload", DType::U8, {64}, payload);
    w.add("empty", DType::F32, {0, 4}, std::vector<uint8_t>{});
    w.set_metadata("format", "cortiq");
    w.set_metadata("note", "round trip");
    const std::string path = dir.file("rt.safetensors");
    w.write(path);
    EXPECT_FALSE(fs::exists(fmt::format("{}.tmp.{}", path, ::getpid())));

    const auto f = SafetensorsFile::open(path);
    EXPECT_EQ(f.tensors().size(), 7u);
    EXPECT_EQ(f.metadata().at("format"), "cortiq");
    EXPECT_EQ(f.metadata().at("note"), "round trip");
    EXPECT_EQ(f.data_offset() % 8, 0u);

    const auto& ta = f.info("a");
    EXPECT_EQ(ta.dtype, DType::F32);
    EXPECT_EQ(ta.shape, (std::vector<int64_t>{3, 5}));
    const MatF a2 = to_matf(ta, f.bytes(ta), path);
    ASSERT_EQ(a2.rows(), 3);
    ASSERT_EQ(a2.cols(), 5);
    EXPECT_EQ(a2.vec(), a.vec());

    const auto hv = to_floats(f.info("h"), f.bytes(f.info("h")), path);
    EXPECT_EQ(hv, (std::vector<float>{1.5f, -2.0f}));
    const MatF bm = to_matf(f.info("bf"), f.bytes(f.info("bf")), path);
    EXPECT_EQ(bm.rows(), 1);
    EXPECT_EQ(bm.vec(), (std::vector<float>{3.0f, -0.5f, 7.0f}));

    const auto pb = f.bytes(f.info("payload"));
    EXPECT_EQ(std::vector<uint8_t>(pb.begin(), pb.end()), payload);
    const auto ob = f.bytes(f.info("odd"));
    EXPECT_EQ(std::vector<uint8_t>(ob.begin(), ob.end()), odd);
    const auto ib = f.bytes(f.info("i64"));
    std::vector<int64_t> i64r(2);
    std::memcpy(i64r.data(), ib.data(), 16);
    EXPECT_EQ(i64r, i64);
    EXPECT_EQ(f.info("empty").numel(), 0);

    // Layout: no holes, element-size alignment everywhere, multiples of 8
    // bytes 8-aligned.
    uint64_t end = 0;
    for (const auto& t : f.tensors()) {
        EXPECT_EQ(t.begin, end) << t.name;
        end = t.end;
        EXPECT_EQ(t.begin % dtype_size(t.dtype), 0u) << t.name;
        if (t.nbytes() % 8 == 0) EXPECT_EQ(t.begin % 8, 0u) << t.name;
    }
    EXPECT_EQ(f.data_offset() + end, fs::file_size(path));

    EXPECT_THROW(to_floats(f.info("payload"), pb, path), Error);  // not a float dtype
    EXPECT_THROW(f.info("nope"), Error);
}

TEST(Safetensors, WriterRejectsBadInput) {
    SafetensorsWriter w;
    EXPECT_THROW(w.add("x", DType::F32, {2, 2}, std::vector<uint8_t>(15)), Error);
    w.add("x", DType::F32, {2}, std::vector<uint8_t>(8));
    EXPECT_THROW(w.add("x", DType::F32, {2}, std::vector<uint8_t>(8)), Error);
    EXPECT_THROW(w.add("__metadata__", DType::U8, {1}, std::vector<uint8_t>(1)), Error);
}

TEST(Safetensors, WriteFailureLeavesNoFile) {
    TempDir dir;
    SafetensorsWriter w;
    w.add("big", DType::U8, {1 << 20}, std::vector<uint8_t>(1 << 20, 1));
    // A folder that does not exist: the temporary file cannot be created.
    EXPECT_THROW(w.write(dir.file("missing/x.safetensors")), Error);

    // A full disk, simulated by a file size limit (write() fails with EFBIG).
    const std::string path = dir.file("full.safetensors");
    {
        std::ofstream old(path);
        old << "previous contents";
    }
    struct rlimit saved {};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = saved;
    lim.rlim_cur = 64 * 1024;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
    bool threw = false;
    std::string msg;
    try {
        w.write(path);
    } catch (const Error& e) {
        threw = true;
        msg = e.what();
    }
    setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, old_handler);
    EXPECT_TRUE(threw);
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(fmt::format("{}.tmp.{}", path, ::getpid())));
    std::ifstream in(path);
    std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(contents, "previous contents");  // the target is untouched
}

TEST(Safetensors, RejectsCorruptFiles) {
    TempDir dir;
    const std::string good = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";

    // Shorter than the 8-byte length.
    {
        const auto p = dir.file("tiny.safetensors");
        std::ofstream(p, std::ios::binary) << "abc";
        expect_rejected(p, {"too short"});
    }
    // Header length past the end of the file.
    {
        const auto p = dir.file("hdrlen.safetensors");
        write_raw(p, good, 16, 1 << 20);
        expect_rejected(p, {"header length"});
    }
    // Bad JSON.
    {
        const auto p = dir.file("json.safetensors");
        write_raw(p, R"({"w":{"dtype":"F32",)", 16);
        expect_rejected(p, {"JSON"});
    }
    // Truncated data: the tensor runs past the end.
    {
        const auto p = dir.file("trunc.safetensors");
        write_raw(p, good, 10);
        expect_rejected(p, {"'w'", "past the end"});
    }
    // Shape × dtype size disagrees with the byte range (F16 is 2 bytes).
    {
        const auto p = dir.file("dsize.safetensors");
        write_raw(p, R"({"w":{"dtype":"F16","shape":[2,2],"data_offsets":[0,16]}})", 16);
        expect_rejected(p, {"'w'", "F16", "16 bytes"});
    }
    // Unknown dtype.
    {
        const auto p = dir.file("dtype.safetensors");
        write_raw(p, R"({"w":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", 4);
        expect_rejected(p, {"'w'", "F8_E4M3"});
    }
    // Overlapping ranges.
    {
        const auto p = dir.file("overlap.safetensors");
        write_raw(p,
                  R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                  16);
        expect_rejected(p, {"'a'", "'b'", "overlap"});
    }
    // Reversed offsets, negative dimension, missing fields, bad metadata.
    {
        const auto p = dir.file("rev.safetensors");
        write_raw(p, R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8);
        expect_rejected(p, {"'w'", "reversed"});
    }
    {
        const auto p = dir.file("neg.safetensors");
        write_raw(p, R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4);
        expect_rejected(p, {"'w'", "non-negative"});
    }
    {
        const auto p = dir.file("noshape.safetensors");
        write_raw(p, R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4);
        expect_rejected(p, {"'w'", "shape"});
    }
    {
        const auto p = dir.file("meta.safetensors");
        write_raw(p,
                  R"({"__metadata__":{"k":1},"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
                  1);
        expect_rejected(p, {"__metadata__", "'k'"});
    }
    // An absurd shape whose byte count overflows 64 bits.
    {
        const auto p = dir.file("ovf.safetensors");
        write_raw(
            p, R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4);
        expect_rejected(p, {"'w'", "overflow"});
    }
    // A well-formed file for contrast.
    {
        const auto p = dir.file("good.safetensors");
        write_raw(p, good, 16);
        EXPECT_NO_THROW(SafetensorsFile::open(p));
    }
    // A missing file.
    EXPECT_THROW(SafetensorsFile::open(dir.file("absent.safetensors")), Error);
}

TEST(Safetensors, ShardedCheckpoint) {
    TempDir dir;
    SafetensorsWriter s1, s2;
    s1.add_f32("model.a", {2}, std::vector<float>{1, 2});
    s1.add_f32("model.b", {1}, std::vector<float>{3});
    s2.add_f32("model.c", {2, 1}, std::vector<float>{4, 5});
    s1.write(dir.file("model-00001-of-00002.safetensors"));
    s2.write(dir.file("model-00002-of-00002.safetensors"));
    const std::string index = R"({"metadata":{"total_size":20},"weight_map":{
        "model.a":"model-00001-of-00002.safetensors",
        "model.b":"model-00001-of-00002.safetensors",
        "model.c":"model-00002-of-00002.safetensors"}})";
    std::ofstream(dir.file("model.safetensors.index.json")) << index;

    const auto ck = Checkpoint::open(dir.path().string());
    EXPECT_EQ(ck.shards().size(), 2u);
    EXPECT_EQ(ck.names(), (std::vector<std::string>{"model.a", "model.b", "model.c"}));
    EXPECT_EQ(ck.load_floats("model.c"), (std::vector<float>{4, 5}));
    const MatF c = ck.load_matf("model.c");
    EXPECT_EQ(c.rows(), 2);
    EXPECT_EQ(c.cols(), 1);
    EXPECT_EQ(ck.load_floats("model.b"), (std::vector<float>{3}));
    try {
        ck.info("model.zzz");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("model.zzz"), std::string::npos);
    }

    // An index naming a tensor its shard lacks.
    std::ofstream(dir.file("model.safetensors.index.json"))
        << R"({"weight_map":{"model.a":"model-00002-of-00002.safetensors"}})";
    EXPECT_THROW(Checkpoint::open(dir.path().string()), Error);
    // An index naming a missing shard.
    std::ofstream(dir.file("model.safetensors.index.json"))
        << R"({"weight_map":{"model.a":"model-00009-of-00009.safetensors"}})";
    EXPECT_THROW(Checkpoint::open(dir.path().string()), Error);
}

TEST(Safetensors, RealCheckpoints) {
    const fs::path data = cortiq::test::shared_data();
    REQUIRE_DATA_AT(data / "models");
    const auto ck = Checkpoint::open((data / "models/tiny-llama-6m").string());
    EXPECT_EQ(ck.names().size(), 57u);
    const auto& t = ck.info("model.embed_tokens.weight");
    EXPECT_EQ(t.dtype, DType::BF16);
    EXPECT_EQ(t.shape, (std::vector<int64_t>{4096, 256}));
    const MatF e = ck.load_matf("model.embed_tokens.weight");
    EXPECT_EQ(e.rows(), 4096);
    const auto ck2 = Checkpoint::open((data / "models/stories260K/model.safetensors").string());
    EXPECT_EQ(ck2.names().size(), 47u);
    EXPECT_EQ(ck2.info("model.norm.weight").dtype, DType::F32);
}
