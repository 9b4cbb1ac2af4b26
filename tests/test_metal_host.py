"""The Metal home's host code (csrc/gpu/metal/*.mm), checked by clang++ for syntax and types.

The Metal home is Objective-C++ and builds only on Apple platforms. Here each of its files is
compiled with clang++ 16 in syntax-only mode against a shim of the Foundation and Metal API it
uses (tests/metal_host_shim/, declared with the SDK's signatures): a misspelled selector, a wrong
argument type or an unimplemented Device method fails. What Metal does at run time (compiling
the MSL, executing, synchronising) is not checked: the Metal home is checked here, not run.

The host's agreements with the generated kernels are checked too: the kernel function of every
Metal stamp is named after its template, storage buffers sit at slots 0..n-1 and the argument
block at the slot the host binds, and no kernel takes threadgroup memory from the host.
"""

import re
import subprocess

import pytest
from metal_check import ROOT, stamp_metal
from metal_check import clang as find_clang

SHIM = ROOT / "tests" / "metal_host_shim"
METAL = ROOT / "csrc" / "gpu" / "metal"
# Objective-C++ under ARC needs the Apple runtime's rules (-fobjc-runtime=macosx).
OBJCXX_FLAGS = ["-x", "objective-c++", "-fobjc-arc", "-fobjc-runtime=macosx", "-fsyntax-only",
                "-std=c++17", "-Wall", "-Wextra", "-Werror"]


def _clang():
    return find_clang("Metal host check")


def _check_objcxx(clang, path):
    return subprocess.run([clang, *OBJCXX_FLAGS, "-I", str(SHIM), "-I", str(ROOT / "csrc"),
                           str(path)], capture_output=True, text=True)


def _sources():
    files = sorted(METAL.glob("*.mm"))
    assert files, f"no Objective-C++ files in {METAL}"
    return files


def test_every_metal_host_file_passes_the_shim_check():
    clang = _clang()
    failures = []
    for path in _sources():
        r = _check_objcxx(clang, path)
        if r.returncode != 0:
            failures.append(f"{path.name}:\n{r.stderr[:3000]}")
    assert not failures, "\n".join(failures)
    print(f"{len(_sources())} Metal host files pass clang's syntax and type check against the shim")


def test_device_listing_compiles_with_the_metal_home():
    # csrc/gpu/device.cpp is plain C++ and includes the home's C++ face under DASLLAMA_METAL.
    clang = _clang()
    r = subprocess.run([clang, "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                        "-DDASLLAMA_METAL=1", "-I", str(ROOT / "csrc"),
                        str(ROOT / "csrc" / "gpu" / "device.cpp")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[:3000]


# Negative controls: each snippet is checked twice, as written (it must pass, so the harness is
# sound) and with one plausible mistake (it must fail, so a pass above means something).
_SNIPPET = """#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
void record(id<MTLDevice> device, id<MTLCommandBuffer> cb, id<MTLComputePipelineState> pipeline,
            id<MTLBuffer> buffer, const void* args) {
    id<MTLComputeCommandEncoder> enc =
        [cb computeCommandEncoderWithDispatchType:MTLDispatchTypeConcurrent];
    [enc setComputePipelineState:pipeline];
    [enc setBuffer:buffer offset:0 atIndex:0];
    [enc setBytes:args length:16 atIndex:30];
    [enc dispatchThreadgroups:MTLSizeMake(8, 1, 1) threadsPerThreadgroup:MTLSizeMake(64, 1, 1)];
    [enc memoryBarrierWithScope:MTLBarrierScopeBuffers];
    [enc endEncoding];
    void* p = [buffer contents];
    (void)p;
    NSUInteger n = buffer.length;
    (void)n;
    id<MTLBuffer> b = [device newBufferWithLength:64 options:MTLResourceStorageModePrivate];
    (void)b;
}
"""

_MISTAKES = {
    "misspelled selector": ("[buffer contents]", "[buffer contentz]"),
    "misspelled property": ("buffer.length", "buffer.lenght"),
    "grid as an integer": ("dispatchThreadgroups:MTLSizeMake(8, 1, 1)", "dispatchThreadgroups:8"),
    "dispatch type as an integer": ("WithDispatchType:MTLDispatchTypeConcurrent",
                                    "WithDispatchType:1"),
    "missing argument": ("newBufferWithLength:64 options:MTLResourceStorageModePrivate",
                         "newBufferWithLength:64"),
}


@pytest.mark.parametrize("mistake", sorted(_MISTAKES))
def test_the_check_rejects_a_wrong_call(mistake, tmp_path):
    clang = _clang()
    good = tmp_path / "good.mm"
    good.write_text(_SNIPPET)
    r = _check_objcxx(clang, good)
    assert r.returncode == 0, f"the correct snippet must pass:\n{r.stderr[:2000]}"
    right, wrong = _MISTAKES[mistake]
    assert _SNIPPET.count(right) == 1
    bad = tmp_path / "bad.mm"
    bad.write_text(_SNIPPET.replace(right, wrong))
    r = _check_objcxx(clang, bad)
    assert r.returncode != 0, f"the check accepted a {mistake}"
    print(f"{mistake}: rejected ({r.stderr.splitlines()[0] if r.stderr else 'no message'})")


# --- the host's agreements with the kernels ---

def _define(path, name):
    m = re.search(rf"^#define {name} (\d+)\s*$", path.read_text(), re.M)
    assert m, f"{path}: no '#define {name} N'"
    return int(m.group(1))


def _host_args_slot():
    m = re.search(r"constexpr uint32_t kArgsSlot = (\d+);", (METAL / "mtl_device.h").read_text())
    assert m, "csrc/gpu/metal/mtl_device.h: no kArgsSlot"
    return int(m.group(1))


@pytest.fixture(scope="module")
def metal_stamps(tmp_path_factory):
    stamps = stamp_metal(tmp_path_factory.mktemp("stamps"))
    return [(name, template, path.read_text()) for name, (template, path) in stamps.items()]


def test_host_binds_the_argument_block_where_the_kernels_read_it():
    slot = _define(ROOT / "shaders" / "gk" / "gk_msl.h", "GK_MSL_ARGS_SLOT")
    assert _host_args_slot() == slot


def _binding_failures(stamps, args_slot):
    failures = []
    for name, template, text in stamps:
        kernels = re.findall(r"\bkernel\s+void\s+(\w+)\s*\(", text)
        if kernels != [template]:
            failures.append(f"{name}: kernel functions {kernels}, the host looks up '{template}'")
            continue
        # The parameter list: from the kernel's name to the "]]) {" that opens its body.
        signature = re.search(r"\bkernel\s+void\s+\w+\s*\((.*?\]\])\)\s*\{", text, re.S).group(1)
        slots = sorted(int(s) for s in re.findall(r"\[\[buffer\((\d+)\)\]\]", signature))
        if not slots or slots[-1] != args_slot or slots[:-1] != list(range(len(slots) - 1)):
            failures.append(f"{name}: buffer slots {slots}, the host binds 0..n-1 and {args_slot}")
        if "[[threadgroup(" in signature:
            failures.append(f"{name}: takes threadgroup memory from the host, which binds none")
    return failures


def test_every_metal_stamp_matches_the_host_binding(metal_stamps):
    args_slot = _host_args_slot()
    failures = _binding_failures(metal_stamps, args_slot)
    assert not failures, "\n".join(failures)
    print(f"{len(metal_stamps)} Metal stamps: entry point = template, buffers 0..n-1, "
          f"arguments at slot {args_slot}")


def test_the_binding_check_rejects_a_mismatch(metal_stamps):
    # Negative controls: the argument block one slot off, and a host looking up the stamp's name
    # instead of its template's (they differ for every stamp with defines).
    assert len(_binding_failures(metal_stamps, _host_args_slot() - 1)) == len(metal_stamps)
    by_name = [(name, name, text) for name, template, text in metal_stamps if name != template]
    assert by_name
    assert len(_binding_failures(by_name, _host_args_slot())) == len(by_name)
