#include "io/text_file.hpp"

#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace cortiq::io {

std::string read_text_file(const std::string& path, const std::string& what) {
    std::ifstream f(path, std::ios::binary);
    CORTIQ_CHECK(f, "cannot open {} {}", what, path);
    std::stringstream ss;
    ss << f.rdbuf();
    CORTIQ_CHECK(!f.bad(), "read error in {} {}", what, path);
    return ss.str();
}

}  // namespace cortiq::io
