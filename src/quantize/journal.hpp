// The journal of a quantize run: OUT.journal/ holds the run's settings and one
// safetensors file per finished layer (written atomically), so a run killed at
// any point resumes with --resume and produces a byte-identical file.
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

class Journal {
  public:
    // Creates OUT.journal (or reopens it with `resume` when its settings
    // match; `force` discards an old one). Throws with advice otherwise.
    Journal(const std::string& out_path, const nlohmann::json& settings, bool resume, bool force);
    std::optional<LayerRecord> load(int64_t key) const;  // key: layer index, -1 for the head
    void save(int64_t key, const LayerRecord& rec) const;
    void remove() const;
    const std::string& dir() const { return dir_; }

  private:
    std::string file_of(int64_t key) const;
    std::string dir_;
};

}  // namespace cortiq::quant
