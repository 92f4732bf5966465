// cortiq tokenize MODEL (--text FILE | --prompt TEXT) [--ids | --pieces] [--bos] [--tokenizer DIR]
#include <fmt/format.h>

#include <memory>

#include "commands.hpp"
#include "core/error.hpp"
#include "io/model_tokenizer.hpp"
#include "io/text_file.hpp"
#include "io/token_listing.hpp"
#include "runtime_args.hpp"

namespace cortiq::cli {

namespace {

struct TokenizeArgs {
    std::string model, text, prompt, tokenizer;
    bool ids = false, pieces = false, bos = false;
};

void run(const TokenizeArgs& a) {
    CORTIQ_CHECK(a.text.empty() != a.prompt.empty(), "tokenize: give --text FILE or --prompt TEXT");
    const auto tok = io::load_model_tokenizer(a.model, a.tokenizer);
    const std::string text = a.text.empty() ? a.prompt : io::read_text_file(a.text, "text");
    std::vector<int32_t> ids;
    if (a.bos) {
        CORTIQ_CHECK(tok.bos_id() >= 0, "tokenize: --bos given but {} has no BOS token", a.model);
        ids.push_back(tok.bos_id());
    }
    const auto body = tok.encode(text, /*add_special=*/false);
    ids.insert(ids.end(), body.begin(), body.end());
    const auto style = a.ids      ? io::TokenListing::ids
                       : a.pieces ? io::TokenListing::pieces
                                  : io::TokenListing::lines;
    fmt::print("{}", io::token_listing(tok, ids, style));
}

}  // namespace

void add_tokenize(CLI::App& app) {
    auto* cmd = app.add_subcommand("tokenize",
                                   "MODEL --text FILE | --prompt TEXT [--ids|--pieces] [--bos]: "
                                   "the token ids of a text (as llama-tokenize)");
    auto a = std::make_shared<TokenizeArgs>();
    cmd->add_option("model", a->model, "Hugging Face model folder or cortiq file")->required();
    auto* text = cmd->add_option("--text", a->text, "text file, tokenised whole");
    auto* prompt = cmd->add_option("--prompt", a->prompt, "text to tokenise");
    text->excludes(prompt);
    auto* ids = cmd->add_flag("--ids", a->ids, "only the ids, as one list: [1, 2, 3]");
    auto* pieces = cmd->add_flag("--pieces", a->pieces, "only the pieces, one quoted per line");
    ids->excludes(pieces);
    cmd->add_flag("--bos", a->bos, "start with the BOS token (as ppl --bos)");
    cmd->add_option("--tokenizer", a->tokenizer,
                    "folder with tokenizer.json (default: the model's)");
    cmd->footer(
        "Example: cortiq tokenize model-hf --prompt \"Once upon a time\"\n"
        "Output: one line per token, `id -> 'piece'` (the id right-aligned in 6 columns);\n"
        "with --ids one line [id, id, ...]; with --pieces one line 'piece' per token. A piece\n"
        "is the text the token adds when decoding; backslash, control characters and the bytes\n"
        "of a partial UTF-8 character are escaped (\\\\, \\n, \\t, \\r, \\xNN). No special\n"
        "tokens are added (the text's own are recognised) unless --bos.");
    cmd->callback([a] { run(*a); });
}

}  // namespace cortiq::cli
