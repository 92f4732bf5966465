// The files of a Hugging Face model folder that a compressed file carries in
// its safetensors metadata, each under its file name (config.json is carried
// as "config"): quantize stores them, export writes them back out.
#pragma once

#include <array>
#include <string_view>

namespace cortiq::io {

// Always carried: without it the file cannot be tokenised.
inline constexpr std::string_view kTokenizerFile = "tokenizer.json";
// Carried when the model folder has them.
inline constexpr std::array<std::string_view, 4> kOptionalCarriedFiles = {
    "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
    "chat_template.jinja"};

}  // namespace cortiq::io
