// The Metal home's entry points for the backend-neutral layer (csrc/gpu/device.cpp). Plain C++,
// so that file stays C++: the Metal devices there are, why there are none, and opening one.
// The home itself is Objective-C++ (csrc/gpu/metal/*.mm) and is built on Apple platforms only.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/device.h"

namespace dasllama::gpu::mtl {

// Every Metal device, in MTLCopyAllDevices order, or empty; never throws.
std::vector<DeviceInfo> list_metal_devices();
// Why list_metal_devices() is empty ("" when it is not).
std::string metal_unavailable_reason();

// "metal" (the system's default GPU), "metal:N" (index N) or "metal:NAME" (the first device whose
// name contains NAME, case-insensitive); `selector` is the text after "metal", colon included.
// Throws DeviceError naming the spec and the devices there are.
std::shared_ptr<Device> open_metal_device(std::string_view selector);

}  // namespace dasllama::gpu::mtl
