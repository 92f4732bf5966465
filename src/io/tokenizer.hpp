// Hugging Face tokenizer.json: byte-level BPE (GPT-2 / Qwen / Llama-3 style,
// pre-tokenizer regex through PCRE2) and SentencePiece-style BPE (▁, byte
// fallback), added/special tokens, BOS/EOS from tokenizer_config.json.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cortiq::io {

class Tokenizer {
  public:
    // Reads DIR/tokenizer.json (and DIR/tokenizer_config.json when present).
    static Tokenizer load(const std::string& model_dir);
    ~Tokenizer();
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;

    // Special tokens written in the text are recognised; add_special adds the
    // post-processor's BOS (if any).
    std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;
    std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
    // Text of one token as it appears when decoded in a stream (for printing
    // tokens as they come). prev_id: the token before it, -1 at the start; after
    // -1 or a special token the decoder's leading-space strip applies (as for
    // the first token of decode). Byte-level and <0xXX> tokens give their raw
    // bytes, so one piece can be an incomplete UTF-8 sequence: concatenating the
    // pieces of a sequence gives the bytes of its text. Added tokens give their
    // content.
    std::string decode_token(int32_t id, int32_t prev_id = -1) const;

    int32_t token_to_id(std::string_view token) const;  // -1 if none
    std::string id_to_token(int32_t id) const;          // "" if none
    bool is_special(int32_t id) const;                  // a special added token

    // Model vocab and added tokens: one past the largest id.
    int32_t vocab_size() const;
    int32_t bos_id() const;  // -1 if none
    int32_t eos_id() const;  // -1 if none

    struct Impl;

  private:
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace cortiq::io
