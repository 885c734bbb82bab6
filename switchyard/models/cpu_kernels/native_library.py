"""Builds and loads the native CPU kernels (gemv.c's products, decode_layers.c's fused decode step) once per
machine, or says why it cannot.

The kernels are plain C with AVX-512 intrinsics, so they compile with the system C compiler in about half a
second, without PyTorch's headers. On first use the sources are compiled into the user's cache folder
(`$XDG_CACHE_HOME/switchyard/kernels`, else `~/.cache/switchyard/kernels`: a build artifact, not state),
named by a hash of the sources, the flags and the compiler, and loaded with ctypes. Where the CPU lacks
AVX-512 VNNI and BF16, no compiler is found, the build fails, or `SWITCHYARD_NATIVE_KERNELS=0`,
`native_kernels()` returns None with the reason logged once, and the layers keep PyTorch's own kernels:
the native path is an optimisation, never a requirement.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

DISABLE_ENV = "SWITCHYARD_NATIVE_KERNELS"
"""Set to 0 to keep PyTorch's kernels even where the native ones would build."""

SOURCES = (Path(__file__).with_name("gemv.c"), Path(__file__).with_name("decode_layers.c"))
HEADERS = (Path(__file__).with_name("bf16.h"),)
"""Included by the sources: hashed with them, not compiled on their own."""
REQUIRED_CPU_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16")
COMPILE_FLAGS = (
    "-O3",
    "-mavx512f",
    "-mavx512bw",
    "-mavx512vl",
    "-mavx512dq",
    "-mavx512vnni",
    "-mavx512bf16",
    "-fopenmp",
    "-fPIC",
    "-shared",
)


class NativeKernelsUnavailable(RuntimeError):
    """Why the native kernels cannot run here (the CPU, the compiler, or the build)."""


@dataclass(frozen=True)
class NativeKernels:
    """The loaded library, with its functions' argument types declared."""

    library: ctypes.CDLL
    path: Path


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first processor's feature flags, empty where /proc/cpuinfo is missing (not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def missing_cpu_flags(flags: frozenset[str]) -> list[str]:
    return [flag for flag in REQUIRED_CPU_FLAGS if flag not in flags]


def default_cache_dir() -> Path:
    """Where compiled kernels are kept: `$XDG_CACHE_HOME/switchyard/kernels`, else `~/.cache/...`."""
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "switchyard" / "kernels"


def _compiler() -> str:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise NativeKernelsUnavailable("no C compiler (cc or gcc) on PATH")
    return compiler


def _compiler_identity(compiler: str) -> str:
    try:
        done = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NativeKernelsUnavailable(f"the C compiler {compiler!r} does not run: {error}") from error
    return done.stdout.splitlines()[0] if done.stdout else compiler


def build_library(cache_dir: Path, sources: tuple[Path, ...] = SOURCES) -> Path:
    """Compiles `sources` into one library in `cache_dir` (once: the file name carries a hash of everything
    that shapes it)."""
    compiler = _compiler()
    digest = hashlib.sha256()
    for source in (*sources, *HEADERS):
        digest.update(source.read_bytes())
    digest.update(" ".join(COMPILE_FLAGS).encode())
    digest.update(_compiler_identity(compiler).encode())
    target = cache_dir / f"libswitchyard_gemv_{digest.hexdigest()[:16]}.so"
    if target.exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir) as scratch:
        partial = Path(scratch) / target.name
        done = subprocess.run(
            [compiler, *COMPILE_FLAGS, "-o", str(partial), *map(str, sources), "-lm"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise NativeKernelsUnavailable(
                f"compiling {', '.join(s.name for s in sources)} failed: {done.stderr.strip()[-800:]}"
            )
        os.replace(partial, target)  # atomic: a concurrent builder finds a whole library or none
    return target


_SIGNATURES = {
    # name: (argument types, one letter each: p pointer, i int64, f int flag, d float),
    #       result (an int, 1 = done) or None
    "sy_gemv_bf16": ("piippipf", None),
    "sy_dequantize_int4": ("pppiiipf", None),
    "sy_dequantize_int8": ("ppiipf", None),
    "sy_rms_norm": ("pfiipfdp", None),
    "sy_linear_int8": ("pfiippppipf", ctypes.c_int),
    "sy_linear_int4": ("pfiipppipipf", ctypes.c_int),
    "sy_decode_layers": ("pipp", ctypes.c_int),
}
_TYPES = {"p": ctypes.c_void_p, "i": ctypes.c_int64, "f": ctypes.c_int, "d": ctypes.c_float}


def _declare(library: ctypes.CDLL) -> None:
    for name, (letters, result) in _SIGNATURES.items():
        function = getattr(library, name)
        function.argtypes = [_TYPES[letter] for letter in letters]
        function.restype = result


def load_native_kernels(cache_dir: Path | None = None) -> NativeKernels:
    """Builds (if needed) and loads the kernels; raises NativeKernelsUnavailable saying why not."""
    if os.environ.get(DISABLE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        raise NativeKernelsUnavailable(f"{DISABLE_ENV}=0")
    missing = missing_cpu_flags(cpu_flags())
    if missing:
        raise NativeKernelsUnavailable(f"the CPU lacks {', '.join(missing)}")
    import torch  # noqa: F401  (OpenMP: the library must bind to the runtime torch already loaded)

    try:
        path = build_library(cache_dir or default_cache_dir())
    except OSError as error:  # a read-only or full home: the build has nowhere to go
        raise NativeKernelsUnavailable(f"cannot write the kernel library: {error}") from error
    try:
        library = ctypes.CDLL(str(path))
    except OSError as error:
        raise NativeKernelsUnavailable(f"loading {path.name} failed: {error}") from error
    _declare(library)
    return NativeKernels(library=library, path=path)


@functools.cache
def native_kernels() -> NativeKernels | None:
    """The kernels for this process, or None (the reason logged once) where they cannot run."""
    try:
        kernels = load_native_kernels()
    except NativeKernelsUnavailable as why:
        logger.info("native CPU kernels off: %s; using PyTorch's kernels", why)
        return None
    logger.info("native CPU kernels loaded from %s", kernels.path.name)
    return kernels
