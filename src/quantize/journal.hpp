// The journal of a quantize run: OUT.journal/ holds the run's settings and one
// safetensors file per finished layer (written atomically and fsynced, like
// the output), so a run killed at any point resumes with --resume and
// produces a byte-identical file.
//
// Each entry records the layer it belongs to, the tensors it holds and the
// version of cortiq that wrote it; loading checks all three, validates every
// payload against its expected shape and names the entry's file in every
// error. Opening a journal removes the temporary files a killed run left
// (of the journal and of the output).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "quantize/quantize.hpp"

namespace cortiq::quant {

struct LayerRecord {
    std::vector<std::pair<std::string, std::vector<uint8_t>>> payloads;  // tensor name → bytes
    std::vector<TensorReport> reports;
};

// Entries besides the decoder layers' (keyed by layer index).
inline constexpr int64_t kHeadKey = -1;   // the head
inline constexpr int64_t kEmbedKey = -2;  // the embedding

// A tensor an entry must hold: its name and the shape of its weight.
struct JournalTensor {
    std::string name;
    int64_t m = 0, n = 0;
};

// The version of cortiq that writes journals (recorded in settings.json and
// every entry; a journal of another version is not resumed).
const char* program_version();

class Journal {
  public:
    // Creates OUT.journal (or reopens it with `resume` when its settings
    // match; `force` discards an old one). Throws with advice otherwise.
    Journal(const std::string& out_path, const nlohmann::json& settings, bool resume, bool force);
    // The journal of a rank other than 0 under mpirun: rank 0 keeps the
    // journal; this one loads nothing and saves nothing.
    static Journal inactive() { return Journal(); }
    // The entry of `key` (layer index, -1 for the head) if one was saved. It
    // must hold exactly the `expected` tensors (any order), each a valid
    // payload of its shape with its report; returned in `expected`'s order.
    std::optional<LayerRecord> load(int64_t key, const std::vector<JournalTensor>& expected) const;
    void save(int64_t key, const LayerRecord& rec) const;
    void remove() const;
    const std::string& dir() const { return dir_; }
    std::string file_of(int64_t key) const;

  private:
    Journal() = default;
    std::string dir_;  // empty: inactive()
};

}  // namespace cortiq::quant
