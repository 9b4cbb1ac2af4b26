"""Stamp the kernel templates into the homes (run by CMake at build time).

Reads shaders/stamps.txt and writes, under --out:
  vulkan/NAME.comp, vulkan/NAME.spv   GLSL wrapper and its SPIR-V (when a compiler is given)
  metal/NAME.metal                    the flattened MSL text of each Metal stamp
  gk_args.h                           one argument struct per template (namespace gk_args)
  gk_stamps.cpp                       the stamp table of csrc/gpu/stamps.h

    python shaders/stamp.py --out DIR [--glslc PATH | --glslang PATH] [--cpp "c++ -E"]
                            [--coopmat-glslang PATH] [--only NAME,NAME...]
                            [--cache DIR] [--jobs N]

Stamps compile in parallel (--jobs, default one per CPU). With --cache, each SPIR-V is kept
under the hash of what produced it (the compiler's files, its flags and the preprocessed
source), so a build re-stamps only the kernels whose text changed, and two build trees of one
checkout share their work.

Stamps defining GK_COOPMAT use cooperative matrices (GL_KHR_cooperative_matrix), which older
shader compilers reject: they are compiled by the glslangValidator given as --coopmat-glslang
(13 or newer) and, without one, left out of the table (the host then uses the portable stamps).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOMES = ("vulkan", "metal")
# Subgroup arithmetic needs SPIR-V 1.3, i.e. Vulkan 1.1. The cooperative-matrix stamps keep the
# same target: SPV_KHR_cooperative_matrix and SPV_KHR_vulkan_memory_model are extensions of it.
VULKAN_TARGET = "vulkan1.1"
# The define that marks a stamp as needing cooperative matrices.
COOPMAT_DEFINE = "GK_COOPMAT"


class StampError(Exception):
    pass


@dataclass
class Stamp:
    name: str
    template: str
    defines: list
    homes: tuple
    line: int

    @property
    def coopmat(self) -> bool:
        return any(d.split("=", 1)[0] == COOPMAT_DEFINE for d in self.defines)


def read_stamps(path: Path) -> list:
    stamps, seen = [], set()
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 4:
            raise StampError(f"{path}:{n}: expected 'name template defines homes', got {raw!r}")
        name, template, defines, homes = parts
        if not name.isidentifier() or name in seen:
            raise StampError(f"{path}:{n}: stamp name {name!r} is not a new identifier")
        seen.add(name)
        if not (HERE / "kernels" / f"{template}.gk.h").is_file():
            raise StampError(f"{path}:{n}: no template shaders/kernels/{template}.gk.h")
        defs = [] if defines == "-" else defines.split(",")
        for d in defs:
            key = d.split("=", 1)[0]
            if not key.isidentifier():
                raise StampError(f"{path}:{n}: bad define {d!r}")
        home_list = tuple(homes.split(","))
        if not set(home_list) <= set(HOMES):
            raise StampError(f"{path}:{n}: homes {homes!r} not within {HOMES}")
        stamp = Stamp(name, template, defs, home_list, n)
        if stamp.coopmat and home_list != ("vulkan",):
            raise StampError(f"{path}:{n}: stamp {name} defines {COOPMAT_DEFINE}: its home is "
                             f"vulkan alone (cooperative matrices are a Vulkan extension here)")
        stamps.append(stamp)
    return stamps


def _define_lines(defines: list) -> str:
    out = []
    for d in defines:
        key, _, value = d.partition("=")
        out.append(f"#define {key} {value or 1}")
    return "\n".join(out)


def glsl_wrapper(stamp: Stamp) -> str:
    return "\n".join([
        "#version 450",
        "#extension GL_GOOGLE_include_directive : require",
        "#define GK_HOME_VULKAN 1",
        _define_lines(stamp.defines),
        f'#include "kernels/{stamp.template}.gk.h"',
        "",
    ])


def _tool_env(tool: str) -> dict | None:
    """The environment to run a compiler in: a glslangValidator from a cmeel wheel
    (site-packages/cmeel.prefix/bin) finds its shared libraries in ../lib only through
    LD_LIBRARY_PATH (the wheel's wrapper script sets it the same way)."""
    lib = Path(tool).resolve().parent.parent / "lib"
    if not any(lib.glob("libglslang*")):
        return None
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(lib), env.get("LD_LIBRARY_PATH")]))
    return env


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


_TOOL_IDS: dict = {}


def _tool_id(tool: str) -> str:
    """A hash of the compiler's executable and its shared glslang libraries: the SPIR-V cache's
    keys change when the compiler does, wherever it is installed."""
    if tool not in _TOOL_IDS:
        exe = Path(tool).resolve()
        h = hashlib.sha256()
        for f in [exe] + sorted((exe.parent.parent / "lib").glob("lib*glslang*")):
            h.update(f.read_bytes())
        _TOOL_IDS[tool] = h.hexdigest()
    return _TOOL_IDS[tool]


def compile_vulkan(stamp: Stamp, out: Path, glslc: str | None, glslang: str | None,
                   cache: Path | None = None) -> Path:
    src = out / "vulkan" / f"{stamp.name}.comp"
    spv = out / "vulkan" / f"{stamp.name}.spv"
    _write_if_changed(src, glsl_wrapper(stamp))
    tool = glslc or glslang
    if glslc:
        flags = ["-fshader-stage=compute", f"--target-env={VULKAN_TARGET}", "-O", "-I", str(HERE)]
        cmd, preprocess = [glslc, *flags, "-o", str(spv), str(src)], [glslc, *flags, "-E", str(src)]
    else:
        flags = ["-V", "--target-env", VULKAN_TARGET, "-S", "comp", "-I" + str(HERE)]
        cmd, preprocess = [glslang, *flags, "-o", str(spv), str(src)], [glslang, *flags, "-E", str(src)]
    env = _tool_env(glslang) if stamp.coopmat else None
    cached = None
    if cache is not None:
        pre = subprocess.run(preprocess, capture_output=True, env=env)
        if pre.returncode == 0:   # else the compile below reports the error
            # #line directives name the wrapper's path, which differs between build trees
            text = b"\n".join(l for l in pre.stdout.splitlines() if not l.startswith(b"#line"))
            key = hashlib.sha256("\0".join([_tool_id(tool), *flags]).encode() + b"\0"
                                 + text).hexdigest()
            cached = cache / f"{key}.spv"
            if cached.is_file():
                spv.write_bytes(cached.read_bytes())
                return spv
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise StampError(f"stamp {stamp.name} (stamps.txt line {stamp.line}) failed to compile:\n"
                         f"{r.stdout}{r.stderr}")
    if cached is not None:
        partial = cached.with_name(f"{cached.name}.{os.getpid()}.{stamp.name}")
        partial.write_bytes(spv.read_bytes())
        os.replace(partial, cached)   # atomic: a concurrent build never reads half a file
    return spv


def flatten_metal(stamp: Stamp, out: Path, cpp: list) -> str:
    cmd = cpp + ["-P", "-x", "c++", "-DGK_HOME_METAL=1", "-I", str(HERE)]
    cmd += [f"-D{d}" for d in stamp.defines]
    cmd += [str(HERE / "kernels" / f"{stamp.template}.gk.h")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise StampError(f"stamp {stamp.name}: flattening for Metal failed:\n{r.stderr}")
    body = "\n".join(line for line in r.stdout.splitlines() if line.strip())
    text = ("// Generated from shaders/kernels/%s.gk.h by shaders/stamp.py.\n"
            "#include <metal_stdlib>\nusing namespace metal;\n%s\n" % (stamp.template, body))
    _write_if_changed(out / "metal" / f"{stamp.name}.metal", text)
    return text


def _host_block(stamp: Stamp, ns: str) -> str:
    undefs = "\n".join(f"#undef {d.split('=', 1)[0]}" for d in stamp.defines)
    return f"""namespace {ns} {{
{_define_lines(stamp.defines)}
#include "kernels/{stamp.template}.gk.h"
struct Args {{ GK_ARGS(GK_HOST_ARG) }};
constexpr uint32_t n_buffers = 0 GK_BUFFERS(GK_HOST_COUNT_BUFFER);
constexpr uint32_t wg_size = GK_WG;
#undef GK_BUFFERS
#undef GK_ARGS
#undef GK_SHARED
#undef GK_WG
{undefs}
}}  // namespace {ns}
"""


def write_args_header(stamps: list, out: Path) -> None:
    first = {}
    for s in stamps:
        first.setdefault(s.template, s)
    parts = ["// Generated by shaders/stamp.py: one argument struct per kernel template, the",
             "// layout of its push-constant block.",
             "#pragma once", '#include "gk/gk_host.h"', "#define GK_HOME_HOST 1",
             "namespace dasllama::gpu::gk_args {"]
    for template, s in first.items():
        parts.append(_host_block(s, f"detail_{template}"))
        parts.append(f"using {template} = detail_{template}::Args;")
        parts.append(f"static_assert(sizeof({template}) <= 128, "
                     f"\"{template}: argument block over the 128-byte push-constant minimum\");")
    parts += ["}  // namespace dasllama::gpu::gk_args", "#undef GK_HOME_HOST", ""]
    (out / "gk_args.h").write_text("\n".join(parts))


def _words(spv: Path) -> list:
    data = spv.read_bytes()
    if len(data) % 4:
        raise StampError(f"{spv}: SPIR-V length {len(data)} is not a multiple of 4")
    return [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]


def _c_string(text: str) -> str:
    # Raw string literals have a length limit on some compilers: emit short adjacent pieces.
    pieces = [text[i:i + 2000] for i in range(0, len(text), 2000)] or [""]
    return "\n".join(f'R"gk({p})gk"' for p in pieces)


def write_table(stamps: list, out: Path, spirv: dict, msl: dict, missing_reason: str) -> None:
    lines = ["// Generated by shaders/stamp.py from shaders/stamps.txt.",
             "#include <cstring>", '#include "gpu/stamps.h"', '#include "gk_args.h"',
             "#define GK_HOME_HOST 1", "namespace dasllama::gpu {", "namespace {"]
    for s in stamps:
        lines.append(_host_block(s, f"stamp_{s.name}"))
        lines.append(f"static_assert(sizeof(stamp_{s.name}::Args) == sizeof(gk_args::{s.template}),"
                     f" \"stamp {s.name}: its defines changed template {s.template}'s arguments\");")
        if s.name in spirv:
            words = ", ".join(f"0x{w:08x}u" for w in spirv[s.name])
            lines.append(f"const uint32_t spirv_{s.name}[] = {{{words}}};")
        if s.name in msl:
            lines.append(f"const char msl_{s.name}[] = {_c_string(msl[s.name])};")
    lines.append("const StampInfo kStamps[] = {")
    for s in stamps:
        sp = (f"spirv_{s.name}, sizeof(spirv_{s.name}) / 4" if s.name in spirv else "nullptr, 0")
        ms = f"msl_{s.name}" if s.name in msl else "nullptr"
        lines.append(f'    {{"{s.name}", "{s.template}", stamp_{s.name}::n_buffers, '
                     f"sizeof(stamp_{s.name}::Args), stamp_{s.name}::wg_size, {sp}, {ms}}},")
    lines += ["};", "}  // namespace",
              "const StampInfo* stamps_begin() { return kStamps; }",
              "const StampInfo* stamps_end() { return kStamps + sizeof(kStamps) / sizeof(kStamps[0]); }",
              "const StampInfo* find_stamp(std::string_view name) {",
              "    for (const StampInfo& s : kStamps)",
              "        if (name == s.name) return &s;",
              "    return nullptr;",
              "}",
              f"bool vulkan_stamps_built() {{ return {'true' if spirv else 'false'}; }}",
              f"const char* vulkan_stamps_missing_reason() {{ return {_c_string(missing_reason)}; }}",
              "}  // namespace dasllama::gpu", ""]
    (out / "gk_stamps.cpp").write_text("\n".join(lines))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--stamps", type=Path, default=HERE / "stamps.txt")
    ap.add_argument("--glslc", default="")
    ap.add_argument("--glslang", default="")
    ap.add_argument("--coopmat-glslang", default="",
                    help="a glslangValidator that accepts GL_KHR_cooperative_matrix, for the "
                         f"stamps defining {COOPMAT_DEFINE}")
    ap.add_argument("--only", default="", help="stamp only these names (comma-separated)")
    ap.add_argument("--cpp", default="c++ -E", help="the C preprocessor for the Metal stamps")
    ap.add_argument("--no-metal", action="store_true")
    ap.add_argument("--cache", type=Path, default=None,
                    help="keep each SPIR-V here under the hash of its inputs, and reuse it")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="stamps compiled at once (default: one per CPU)")
    ap.add_argument("--missing-reason", default="this build found no shader compiler "
                    "(glslc or glslangValidator): Vulkan is off")
    args = ap.parse_args(argv)
    try:
        stamps = read_stamps(args.stamps)
        if args.only:
            wanted = set(args.only.split(","))
            unknown = wanted - {s.name for s in stamps}
            if unknown:
                raise StampError(f"--only names unknown stamps: {', '.join(sorted(unknown))}")
            stamps = [s for s in stamps if s.name in wanted]
        for home in HOMES:
            (args.out / home).mkdir(parents=True, exist_ok=True)
        spirv, msl = {}, {}
        compiler = args.glslc or args.glslang
        coopmat_compiler = args.coopmat_glslang if compiler else ""
        # The argument structs cover every template; the table only the stamps compiled here.
        table = [s for s in stamps if coopmat_compiler or not s.coopmat]
        left_out = len(stamps) - len(table)
        if left_out and compiler:
            print(f"stamp.py: {left_out} cooperative-matrix stamps left out: no "
                  f"--coopmat-glslang (a glslangValidator 13+ that accepts "
                  f"GL_KHR_cooperative_matrix) was given")
        if args.cache is not None:
            args.cache.mkdir(parents=True, exist_ok=True)

        def stamp_one(s: Stamp):
            spv = text = None
            if compiler and "vulkan" in s.homes:
                tools = ((None, coopmat_compiler) if s.coopmat else
                         (args.glslc or None, args.glslang or None))
                spv = _words(compile_vulkan(s, args.out, *tools, cache=args.cache))
            if not args.no_metal and "metal" in s.homes:
                text = flatten_metal(s, args.out, shlex.split(args.cpp))
            return spv, text

        # The compilers run as child processes, so threads are enough to keep every CPU busy;
        # results are gathered in the table's order, the first failure in that order reported.
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            done = list(zip(table, [pool.submit(stamp_one, s) for s in table]))
        for s, job in done:
            spv, text = job.result()
            if spv is not None:
                spirv[s.name] = spv
            if text is not None:
                msl[s.name] = text
        write_args_header(stamps, args.out)
        write_table(table, args.out, spirv, msl, "" if compiler else args.missing_reason)
    except StampError as e:
        print(f"stamp.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
