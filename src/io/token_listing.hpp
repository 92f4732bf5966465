// Token ids as `cortiq tokenize` prints them (the layout of llama.cpp's
// llama-tokenize): one `id -> 'piece'` line per token, the ids alone as one
// bracketed list, or the pieces alone, one quoted piece per line.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace cortiq::io {

class Tokenizer;

enum class TokenListing {
    lines,   // "  1234 -> ' piece'" per token
    ids,     // "[1, 2, 3]" on one line
    pieces,  // "' piece'" per token
};

// A piece is the token's text as decoding a stream of the ids would add it
// (Tokenizer::decode_token with the token before it). Backslash and control
// characters are escaped (\\, \n, \t, \r, \xNN), and so are the bytes of a
// piece that is not valid UTF-8 on its own (a byte-level token that holds
// part of a character), so each token is one line.
std::string token_listing(const Tokenizer& tok, std::span<const int32_t> ids, TokenListing style);

// One piece, escaped as above.
std::string escape_piece(std::string_view piece);

}  // namespace cortiq::io
