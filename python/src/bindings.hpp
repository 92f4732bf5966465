// The pieces of the extension module cortiq._core, one file per area, and
// the conversions they share.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "core/matrix.hpp"
#include "core/progress.hpp"

namespace cortiq::python {

namespace py = pybind11;

void bind_runtime(py::module_& m);   // runtime.cpp: load, Model, Tokenizer, PplResult
void bind_quantize(py::module_& m);  // quantize.cpp: quantize
void bind_tensors(py::module_& m);   // tensors.cpp: PackedLinear, dequant, read_tensors

// Text that may hold bytes which are not UTF-8 (a token can be half a
// character) as str, with U+FFFD for those bytes, as the CLI's JSON does.
py::str utf8_text(const std::string& s);

// A float32 numpy array [rows, cols] that owns `m`'s storage (no copy).
py::array_t<float> to_numpy(MatF&& m);

// A Python callable (or None: no callback) as the library's progress hook:
// called as fn(stage, done, total) with the GIL held, from whichever thread
// the library advances on; what it raises propagates out of the library call.
ProgressCallback progress_callback(const py::object& fn);

}  // namespace cortiq::python
