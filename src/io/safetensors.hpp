// The safetensors container (Hugging Face): an 8-byte little-endian header
// length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]},
// "__metadata__": {str: str}}, then the data section; offsets are relative to
// the data section.
//
// Reading maps the file and validates every entry before any byte is used;
// a sharded checkpoint (model.safetensors.index.json) is a `Checkpoint`.
// Writing goes to a temporary file that is renamed over the target only when
// everything reached the disk.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/matrix.hpp"
#include "io/mapped_file.hpp"

namespace cortiq::io {

enum class DType { F32, F16, BF16, F64, U8, I8, I32, I64 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "F32", "BF16", ...
bool is_float(DType t);                // F32, F16, BF16, F64
// Throws naming `context` (file and tensor) when the name is unknown.
DType parse_dtype(std::string_view name, const std::string& context);

struct TensorInfo {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // byte range in the data section

    int64_t numel() const;
    uint64_t nbytes() const { return end - begin; }
    std::string shape_str() const;  // "[4096, 256]"
};

class SafetensorsFile {
  public:
    // Maps and validates; every error names the file (and the tensor).
    static SafetensorsFile open(const std::string& path);

    const std::string& path() const { return file_.path(); }
    // Tensors in data-section order.
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    const TensorInfo* find(std::string_view name) const;  // nullptr if absent
    const TensorInfo& info(std::string_view name) const;  // throws if absent
    std::span<const uint8_t> bytes(const TensorInfo& t) const;
    // The tensor's pages given back to the system (MappedFile::drop_pages).
    void drop_pages(const TensorInfo& t) const noexcept { file_.drop_pages(bytes(t)); }
    // Data section offset inside the file (for alignment checks).
    uint64_t data_offset() const { return data_offset_; }
    // The file's first data_offset() bytes: the length and the header.
    std::span<const uint8_t> header_bytes() const { return file_.bytes().first(data_offset_); }

  private:
    MappedFile file_;
    uint64_t data_offset_ = 0;
    std::vector<TensorInfo> tensors_;
    std::unordered_map<std::string, size_t> by_name_;
    std::map<std::string, std::string> metadata_;
};

// Any float tensor (F32, F16, BF16, F64) as float32. 2-D tensors keep their
// shape, 1-D become 1 × n, scalars 1 × 1; more dimensions are flattened into
// rows (leading dims) × last dim. `context` names the file.
MatF to_matf(const TensorInfo& t, std::span<const uint8_t> bytes, const std::string& context);
std::vector<float> to_floats(const TensorInfo& t, std::span<const uint8_t> bytes,
                             const std::string& context);

// One safetensors file or a folder holding model.safetensors or a sharded
// set described by model.safetensors.index.json; tensors found by name.
class Checkpoint {
  public:
    // `path`: a .safetensors file, or a folder (index.json preferred, else
    // model.safetensors, else the single *.safetensors in it).
    static Checkpoint open(const std::string& path);

    const std::string& path() const { return path_; }
    bool has(std::string_view name) const { return by_name_.count(std::string(name)) > 0; }
    const TensorInfo& info(std::string_view name) const;
    std::span<const uint8_t> bytes(std::string_view name) const;
    const SafetensorsFile& file_of(std::string_view name) const;
    MatF load_matf(std::string_view name) const;
    std::vector<float> load_floats(std::string_view name) const;
    // The tensor's mapped pages given back once read (MappedFile::drop_pages).
    void drop_pages(std::string_view name) const;
    std::vector<std::string> names() const;  // sorted
    // Metadata of the first shard.
    const std::map<std::string, std::string>& metadata() const;
    const std::vector<SafetensorsFile>& shards() const { return shards_; }

  private:
    struct Where {
        size_t shard;
        const TensorInfo* info;
    };
    const Where& where(std::string_view name) const;

    std::string path_;
    std::vector<SafetensorsFile> shards_;
    std::unordered_map<std::string, Where> by_name_;
};

// Collects named tensors and writes them as one safetensors file. The header
// is padded to a multiple of 8 bytes; tensors are laid out without holes (as
// Hugging Face's reader requires), those whose size is a multiple of 8 bytes
// first, in insertion order, then the others by descending element size: so
// every tensor is aligned to its element size and every tensor of a multiple
// of 8 bytes (all BLR payloads) starts 8-byte aligned.
class SafetensorsWriter {
  public:
    void add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
    void add(std::string name, DType dtype, std::vector<int64_t> shape,
             std::span<const uint8_t> bytes);
    void add_f32(std::string name, std::vector<int64_t> shape, std::span<const float> values);
    void add_f32(std::string name, const MatF& m);  // shape [rows, cols]
    // The checksum keys (io/checksum.hpp) are dropped: only set_checksums
    // writes them, for this file's bytes.
    void set_metadata(std::string key, std::string value);
    // Record checksums of every tensor and of the header in the metadata
    // (io/checksum.hpp).
    void set_checksums(bool on) { checksums_ = on; }
    size_t size() const { return tensors_.size(); }

    // Writes `path`.tmp.<pid>, fsyncs, renames it to `path`. On any error the
    // temporary file is removed, `path` is left as it was, and cortiq::Error
    // is thrown.
    void write(const std::string& path) const;
    // The serialised header JSON (without the length and padding); with
    // checksums, the header's own is still the placeholder.
    std::string header_json() const;

  private:
    struct Entry {
        std::string name;
        DType dtype;
        std::vector<int64_t> shape;
        std::vector<uint8_t> bytes;
    };
    std::vector<size_t> layout_order() const;

    std::vector<Entry> tensors_;
    std::unordered_map<std::string, size_t> by_name_;
    std::map<std::string, std::string> metadata_;
    bool checksums_ = false;
};

}  // namespace cortiq::io
