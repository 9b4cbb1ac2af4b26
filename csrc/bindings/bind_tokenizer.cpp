#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "core/gguf.h"
#include "llm/tokenizer.h"

namespace py = pybind11;

namespace dasllama::bindings {

namespace {

// str is encoded as UTF-8; bytes pass through as they are (so invalid UTF-8 can be tokenized).
std::string text_bytes(const py::object& text) {
    if (py::isinstance<py::bytes>(text)) return text.cast<std::string>();
    if (py::isinstance<py::str>(text)) return text.cast<std::string>();
    throw py::type_error("text must be str or bytes");
}

}  // namespace

void bind_tokenizer(py::module_& m) {
    py::class_<Tokenizer, std::shared_ptr<Tokenizer>>(m, "Tokenizer",
        "A GGUF model's tokenizer (SentencePiece 'spm' or byte-level BPE 'bpe'); token ids "
        "match llama.cpp's.")
        .def_static("from_gguf", &Tokenizer::from_gguf, py::arg("gguf_file"),
                    "Reads tokenizer.ggml.* of a _core.GGUFFile; GGUFError names a bad key.")
        .def("encode",
             [](const Tokenizer& t, const py::object& text, bool add_special, bool parse_special) {
                 const std::string s = text_bytes(text);
                 py::gil_scoped_release nogil;
                 return t.encode(s, add_special, parse_special);
             },
             py::arg("text"), py::arg("add_special") = true, py::arg("parse_special") = false,
             "Token ids of text (str, or bytes taken as they are). add_special adds BOS/EOS as "
             "the model asks; parse_special recognises control-token texts such as "
             "'<|im_end|>'.")
        .def("decode",
             [](const Tokenizer& t, const std::vector<int32_t>& ids) {
                 std::string s;
                 {
                     py::gil_scoped_release nogil;
                     s = t.decode(ids);
                 }
                 return py::bytes(s);
             },
             py::arg("ids"),
             "Bytes of the tokens, control tokens omitted (may end inside a UTF-8 character).")
        .def("piece", [](const Tokenizer& t, int32_t id) { return py::bytes(t.piece(id)); },
             py::arg("id"), "One token's bytes; control tokens give their text.")
        .def("is_eog", &Tokenizer::is_eog, py::arg("id"))
        .def("is_control", &Tokenizer::is_control, py::arg("id"))
        .def_property_readonly("n_vocab", &Tokenizer::n_vocab)
        .def_property_readonly("bos_id", &Tokenizer::bos_id)
        .def_property_readonly("eos_id", &Tokenizer::eos_id)
        .def_property_readonly("eog_ids", &Tokenizer::eog_ids)
        .def_property_readonly("add_bos", &Tokenizer::add_bos)
        .def_property_readonly("add_eos", &Tokenizer::add_eos)
        .def_property_readonly("kind", &Tokenizer::kind)
        .def_property_readonly("pre", &Tokenizer::pre)
        .def("__repr__", [](const Tokenizer& t) {
            return std::string("<Tokenizer ") + t.kind() + " n_vocab=" +
                   std::to_string(t.n_vocab()) + ">";
        });
}

}  // namespace dasllama::bindings
