// cortiq._core: the library's load / run / quantize calls for Python. The
// library's errors arrive as cortiq.Error (bad input, I/O: a RuntimeError)
// or cortiq.InvariantError (a bug in cortiq), with the library's message.
#include <memory>
#include <utility>

#include "bindings.hpp"
#include "core/error.hpp"
#include "core/gpu.hpp"

namespace cortiq::python {

py::str utf8_text(const std::string& s) {
    PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
    if (o == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::str>(o);
}

py::array_t<float> to_numpy(MatF&& m) {
    auto* owner = new MatF(std::move(m));
    py::capsule free_when_done(owner, [](void* p) { delete static_cast<MatF*>(p); });
    return py::array_t<float>({owner->rows(), owner->cols()}, owner->data(), free_when_done);
}

namespace {

// The callable, released with the GIL held: the library copies and drops
// its ProgressCallback on threads that do not hold it, so the callback holds
// the Python object through a pointer whose copies leave its reference count
// alone.
struct PyCallable {
    py::object fn;
    ~PyCallable() {
        py::gil_scoped_acquire gil;
        fn = py::object();
    }
};

}  // namespace

ProgressCallback progress_callback(const py::object& fn) {
    if (fn.is_none()) return {};
    auto held = std::make_shared<PyCallable>();
    held->fn = fn;
    return [held](const std::string& stage, int64_t done, int64_t total) {
        py::gil_scoped_acquire gil;
        held->fn(stage, done, total);
    };
}

}  // namespace cortiq::python

PYBIND11_MODULE(_core, m) {
    namespace py = pybind11;
    m.doc() = "cortiq: binary low-rank compression of transformer LMs (extension module)";
    m.attr("__version__") = CORTIQ_VERSION;
    static py::exception<cortiq::Error> error(m, "Error", PyExc_RuntimeError);
    static py::exception<cortiq::InvariantError> invariant(m, "InvariantError", PyExc_RuntimeError);
    // Registered explicitly so each C++ type meets its own Python type
    // (InvariantError is a logic_error, not a cortiq::Error).
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const cortiq::Error& e) {
            error(e.what());
        } catch (const cortiq::InvariantError& e) {
            invariant(e.what());
        }
    });
    m.def("gpu_available", &cortiq::gpu_available,
          "True when this build has CUDA and a GPU is visible");
    m.def("gpu_unavailable_reason", &cortiq::gpu_unavailable_reason,
          "Why device='gpu' is refused, in one line");
    cortiq::python::bind_runtime(m);
    cortiq::python::bind_quantize(m);
    cortiq::python::bind_tensors(m);
}
