// The steps of export_folder (export/export.hpp), one file each: reading and
// checking the cortiq file (source.cpp), the config and carried files
// (side_files.cpp), the shards (shards.cpp), the folder's temporary sibling
// and its move into place (folder.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "export/export.hpp"
#include "io/safetensors.hpp"

namespace cortiq::hf {

namespace fs = std::filesystem;

// One tensor of the folder: a stored tensor copied as it is, or a payload
// dequantised to the export dtype.
struct OutTensor {
    std::string name;
    io::DType dtype;
    std::vector<int64_t> shape;
    uint64_t nbytes = 0;
    bool dequantise = false;
};

// The cortiq file, read and checked: every payload validated against the
// shape its report gives, before anything is written.
struct Source {
    io::SafetensorsFile file;
    std::string config;                          // config.json as stored
    std::map<std::string, std::string> carried;  // file name → text (io/carried_files.hpp)
    std::vector<OutTensor> tensors;              // in name order
    bool has_head = false;                       // the file holds lm_head.weight
};
Source read_source(const std::string& path, io::DType dtype);

// The config.json to write: the stored text unchanged, unless the file holds
// its own lm_head.weight while the config ties the head to the embedding (a
// tied model quantized with its head): then tie_word_embeddings is set false
// at the top level and in a text_config (Qwen3.5) so that transformers loads
// the stored head. `untied` tells whether it was.
std::string export_config(const std::string& stored, bool has_head, const std::string& what,
                          bool& untied);

// Tensors into shards of at most max_bytes each, in order.
std::vector<std::vector<const OutTensor*>> plan_shards(const std::vector<OutTensor>& tensors,
                                                       uint64_t max_bytes);
// Writes the shards (and the index when there are several) into `dir`;
// returns the file names written.
std::vector<std::string> write_shards(const Source& src,
                                      const std::vector<std::vector<const OutTensor*>>& shards,
                                      const fs::path& dir);

// The output folder: checked before anything is read, written under a
// temporary sibling name that is removed on any failure, and moved into
// place by commit().
class FolderWriter {
  public:
    FolderWriter(const std::string& out_dir, bool force, const std::string& in_path);
    ~FolderWriter();
    FolderWriter(const FolderWriter&) = delete;
    FolderWriter& operator=(const FolderWriter&) = delete;

    const fs::path& dir() const { return tmp_; }  // where to write
    const fs::path& target() const { return out_; }
    // Creates the temporary folder (and removes those killed runs left).
    void begin();
    void commit();

  private:
    fs::path out_, tmp_;
    bool started_ = false, committed_ = false;
};

}  // namespace cortiq::hf
