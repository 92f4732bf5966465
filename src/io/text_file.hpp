// Reading a whole file into a string, with an error naming it.
#pragma once

#include <string>

namespace cortiq::io {

// `what` describes the file in the error ("calibration text").
std::string read_text_file(const std::string& path, const std::string& what = "file");

}  // namespace cortiq::io
