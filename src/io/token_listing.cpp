#include "io/token_listing.hpp"

#include <fmt/format.h>

#include "io/tokenizer.hpp"
#include "io/tokenizer_impl.hpp"

namespace cortiq::io {

std::string escape_piece(std::string_view piece) {
    const bool valid = tok::utf8_is_valid(piece);
    std::string out;
    out.reserve(piece.size());
    for (const char ch : piece) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '\\') {
            out += "\\\\";
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && !valid)) {
            out += fmt::format("\\x{:02x}", c);
        } else {
            out += ch;
        }
    }
    return out;
}

std::string token_listing(const Tokenizer& tok, std::span<const int32_t> ids, TokenListing style) {
    std::string out;
    if (style == TokenListing::ids) {
        out += '[';
        for (size_t i = 0; i < ids.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", ids[i]);
        return out + "]\n";
    }
    int32_t prev = -1;
    for (const int32_t id : ids) {
        const std::string piece = escape_piece(tok.decode_token(id, prev));
        if (style == TokenListing::lines)
            out += fmt::format("{:6} -> '{}'\n", id, piece);
        else
            out += fmt::format("'{}'\n", piece);
        prev = id;
    }
    return out;
}

}  // namespace cortiq::io
