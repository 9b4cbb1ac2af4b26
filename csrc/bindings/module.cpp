#include "bindings/bindings.h"

PYBIND11_MODULE(_core, m) {
    m.doc() = "dasllama's C++ core. Use the public API in the dasllama package instead.";
    dasllama::bindings::bind_errors(m);
    dasllama::bindings::bind_formats(m);
    dasllama::bindings::bind_gguf(m);
    dasllama::bindings::bind_cpu(m);
    dasllama::bindings::bind_tokenizer(m);
    dasllama::bindings::bind_llm(m);
    dasllama::bindings::bind_sampler(m);
    dasllama::bindings::bind_tuning(m);
    dasllama::bindings::bind_gpu(m);
    dasllama::bindings::bind_tts(m);
    dasllama::bindings::bind_asr(m);
    dasllama::bindings::bind_vad(m);
    dasllama::bindings::bind_kokoro(m);
    dasllama::bindings::bind_serve(m);
}
