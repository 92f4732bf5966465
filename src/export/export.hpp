// A compressed cortiq file back to a Hugging Face model folder that
// transformers loads as the original architecture: the compressed linear
// weights dequantised to one float type under their original names, every
// other tensor byte for byte as stored, the config and the tokenizer and
// generation files the file carries (io/carried_files.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.hpp"

namespace cortiq::hf {

struct ExportOptions {
    std::string in_path;                // a cortiq file (quantize's output)
    std::string out_dir;                // the folder to write
    io::DType dtype = io::DType::BF16;  // of the dequantised weights: BF16, F16 or F32
    // Shards at most this many bytes of tensor data (one tensor larger than
    // this gets a shard of its own), as transformers' save_pretrained
    // max_shard_size; one shard is model.safetensors, more are
    // model-0000i-of-0000n.safetensors with model.safetensors.index.json.
    uint64_t max_shard_bytes = 5'000'000'000;
    bool force = false;  // replace a folder that is not empty
};

struct ExportReport {
    std::string out_dir;
    int64_t tensors = 0;                // tensors written
    int64_t dequantised = 0;            // of them, compressed weights turned to floats
    io::DType dtype = io::DType::BF16;  // of those
    uint64_t tensor_bytes = 0;
    std::vector<std::string> files;  // written, in the folder, sorted
    // A tied model's separate compressed head: config.json says
    // tie_word_embeddings false so that the stored head is used.
    bool untied_head = false;

    std::string summary() const;
};

// Writes the folder beside itself first (OUT_DIR.tmp.<pid>) and renames it
// into place once complete. Refuses a non-empty OUT_DIR unless o.force, input
// that is not a cortiq file, and any payload that does not validate (naming
// the file and tensor), before anything is written.
ExportReport export_folder(const ExportOptions& o);

// "bf16", "f16", "f32" (any case) → DType; anything else is refused.
io::DType parse_export_dtype(std::string_view s);
// "5GB", "500MB", "300kB", "1000000" (bytes; decimal units, as transformers'
// max_shard_size) → bytes.
uint64_t parse_shard_size(std::string_view s);

}  // namespace cortiq::hf
