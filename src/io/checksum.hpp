// Checksums of a safetensors file, kept in its own metadata: the XXH3-64
// (seed 0) of every tensor's data bytes and one of the header, so that a
// changed byte anywhere in the file is found before the model runs.
//
//   "cortiq.tensor_xxh3": JSON object, tensor name → 16 lower-case hex digits
//   "cortiq.header_xxh3": 16 lower-case hex digits: the XXH3-64 of the file's
//                         first 8 + N bytes (length and header, padding
//                         included) with this value's own 16 digits read as '0'
//
// A file with neither key (written before checksums existed, or by another
// tool) has none to check; one with either key must carry both.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cortiq::io {

class SafetensorsFile;
class Checkpoint;

inline constexpr std::string_view kTensorChecksumsKey = "cortiq.tensor_xxh3";
inline constexpr std::string_view kHeaderChecksumKey = "cortiq.header_xxh3";
// The header checksum's value as the writer first puts it, before the
// header's own hash is known.
inline constexpr std::string_view kHeaderChecksumPlaceholder = "0000000000000000";

uint64_t xxh3_64(std::span<const uint8_t> bytes);
std::string hex64(uint64_t v);  // 16 lower-case hex digits

// Where the header checksum's 16 digits are in `header` (the JSON text):
// the offset of `value` in its one occurrence of "cortiq.header_xxh3":"value",
// or npos when that text is absent or appears more than once.
size_t header_checksum_offset(std::string_view header, std::string_view value);

// The header checksum of `prefix` (the 8 length bytes and the header) whose
// checksum digits start at `digits` (an offset into prefix): those digits are
// hashed as '0'.
uint64_t header_checksum(std::span<const uint8_t> prefix, size_t digits);

struct ChecksumCheck {
    bool present = false;      // the file carries checksums
    std::string header_error;  // why the header is damaged; empty if it is intact
    // One line per damaged tensor (naming it), in file order; `damaged`
    // holds their names.
    std::vector<std::string> problems;
    std::vector<std::string> damaged;
    int64_t tensors_checked = 0;

    bool ok() const { return header_error.empty() && problems.empty(); }
    // One message naming the file and what is damaged (the header first).
    std::string message(const std::string& path) const;
};

// Checks the header and every tensor; reports, never throws on damage.
ChecksumCheck check_checksums(const SafetensorsFile& f);
// Throws cortiq::Error naming the file and the damaged tensor (or the
// header); does nothing for a file that carries no checksums.
void verify_checksums(const SafetensorsFile& f);
void verify_checksums(const Checkpoint& ck);  // every shard

}  // namespace cortiq::io
