// Typed errors of the core. The bindings map each one to the Python class of the same
// name in dasllama.errors; every message names the file, field, offset or value at fault.
#pragma once

#include <stdexcept>
#include <string>

namespace dasllama {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A GGUF file violates the format (or this reader's limits on it).
struct GGUFError : Error {
    using Error::Error;
};

// A tensor format cannot do what was asked (unknown type, length not a block multiple).
struct FormatError : Error {
    using Error::Error;
};

// Dimensions that do not fit together.
struct ShapeError : Error {
    using Error::Error;
};

// A device (GPU) failed or is missing.
struct DeviceError : Error {
    using Error::Error;
};

}  // namespace dasllama
