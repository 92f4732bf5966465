// cortiq tokenize: the ids it prints are the library tokenizer's, for a model
// folder and for a compressed file that carries the tokenizer in its
// metadata, in each of the three layouts; --bos puts the BOS id first; a bad
// model path is one error line naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_run.hpp"
#include "forward_reference.hpp"
#include "io/safetensors.hpp"
#include "io/token_listing.hpp"
#include "io/tokenizer.hpp"
#include "test_files.hpp"

using namespace cortiq;
using cortiq::test::kData;
using cortiq::test::run_cli;
using cortiq::test::slurp;
namespace fs = std::filesystem;

namespace {

const fs::path kModel = kData / "models/tiny-llama-6m";

// A text with words, digits, punctuation, a newline, a special token and
// characters outside ASCII (byte-level pieces of a partial character).
const std::string kText =
    "Once upon a time, Lily found 42 shiny stones.\n\"Look!\" she said. "
    "<|endoftext|> Über café — naïve 日本";

// escape_piece undone.
std::string unescape(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\' || i + 1 == s.size()) {
            out += s[i];
            continue;
        }
        const char c = s[++i];
        if (c == 'n') out += '\n';
        if (c == 't') out += '\t';
        if (c == 'r') out += '\r';
        if (c == '\\') out += '\\';
        if (c == 'x') {
            out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
            i += 2;
        }
    }
    return out;
}

std::vector<int32_t> parse_ids_line(const std::string& out) {
    const auto j = nlohmann::json::parse(out);
    return j.get<std::vector<int32_t>>();
}

class CliTokenize : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!fs::exists(kModel)) GTEST_SKIP() << "no " << kModel;
        dir_ = test::scratch_dir("cortiq_tok_cli_",
                                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::ofstream(dir_ / "text.txt", std::ios::binary) << kText;
    }
    void TearDown() override {
        if (!dir_.empty()) fs::remove_all(dir_);
    }
    fs::path dir_;
};

}  // namespace

TEST_F(CliTokenize, IdsAreTheLibraryTokenizers) {
    const auto tok = io::Tokenizer::load(kModel.string());
    const auto ids = tok.encode(kText, false);
    ASSERT_GT(ids.size(), 20u);

    // --ids: one JSON-style list
    auto r = run_cli("tokenize " + kModel.string() + " --text " + (dir_ / "text.txt").string() +
                     " --ids");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(parse_ids_line(r.out), ids);

    // default: "id -> 'piece'" per line, the ids in order
    r = run_cli("tokenize " + kModel.string() + " --text " + (dir_ / "text.txt").string());
    ASSERT_EQ(r.code, 0) << r.out;
    std::istringstream lines(r.out);
    std::string line;
    std::vector<int32_t> listed;
    while (std::getline(lines, line)) {
        ASSERT_NE(line.find(" -> '"), std::string::npos) << line;
        EXPECT_EQ(line.back(), '\'') << line;
        listed.push_back(std::stoi(line.substr(0, line.find(" -> "))));
    }
    EXPECT_EQ(listed, ids);
    EXPECT_EQ(r.out, io::token_listing(tok, ids, io::TokenListing::lines));

    // --pieces: one quoted piece per token; unescaped and joined they are the
    // decoded text
    r = run_cli("tokenize " + kModel.string() + " --text " + (dir_ / "text.txt").string() +
                " --pieces");
    ASSERT_EQ(r.code, 0) << r.out;
    std::istringstream plines(r.out);
    std::string joined;
    size_t n = 0;
    while (std::getline(plines, line)) {
        ASSERT_GE(line.size(), 2u);
        joined += unescape(line.substr(1, line.size() - 2));
        ++n;
    }
    EXPECT_EQ(n, ids.size());
    EXPECT_EQ(joined, tok.decode(ids));
}

// A compressed file carries tokenizer.json and tokenizer_config.json in its
// metadata (as cortiq quantize writes them): the same ids; --prompt and --bos.
TEST_F(CliTokenize, ACortiqFileGivesTheSameIdsAndBosComesFirst) {
    const auto tok = io::Tokenizer::load(kModel.string());
    {
        io::SafetensorsWriter w;
        const std::vector<float> one = {1.0f};
        w.add_f32("model.norm.weight", {1}, one);
        w.set_metadata("format", "cortiq-blr");
        w.set_metadata("tokenizer.json", slurp(kModel / "tokenizer.json"));
        w.set_metadata("tokenizer_config.json", slurp(kModel / "tokenizer_config.json"));
        w.write((dir_ / "q.safetensors").string());
    }
    ASSERT_GE(tok.bos_id(), 0);
    auto expected = tok.encode("Once upon a time", false);
    auto r = run_cli("tokenize " + (dir_ / "q.safetensors").string() +
                     " --prompt 'Once upon a time' --ids");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(parse_ids_line(r.out), expected);
    expected.insert(expected.begin(), tok.bos_id());
    r = run_cli("tokenize " + (dir_ / "q.safetensors").string() +
                " --prompt 'Once upon a time' --ids --bos");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(parse_ids_line(r.out), expected);
}

TEST_F(CliTokenize, BadInputIsOneErrorLine) {
    const std::string missing = (dir_ / "no-such-model").string();
    auto r = run_cli("tokenize " + missing + " --prompt hello");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_EQ(r.out.rfind("cortiq: error: ", 0), 0u) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_NE(r.out.find(missing), std::string::npos) << r.out;
    // neither or both of --text and --prompt
    r = run_cli("tokenize " + kModel.string());
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("--text"), std::string::npos) << r.out;
}

// Escapes keep one token per line and mark what is not printable text.
TEST(TokenListing, EscapesControlsAndPartialCharacters) {
    EXPECT_EQ(io::escape_piece("a\nb\t\\"), "a\\nb\\t\\\\");
    EXPECT_EQ(io::escape_piece("\xe6\x97"), "\\xe6\\x97");  // two bytes of a three-byte character
    EXPECT_EQ(io::escape_piece("日本"), "日本");
    EXPECT_EQ(io::escape_piece(std::string("\x01", 1)), "\\x01");
}
