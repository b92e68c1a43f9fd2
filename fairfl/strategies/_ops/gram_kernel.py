"""A compiled float32 Gram for FedMGDA+, built on first use with the system's C compiler.

:func:`fairfl.strategies._ops.gram.gram_matrix` forms ``K_ij = ⟨g_i, g_j⟩`` from the
replies. In numpy that is a packing pass (Python copies each block of differences) and
OpenBLAS's syrk, whose kernels are slow for this shape on some CPUs (tens of rows by
millions of columns; on AMD Zen 4 its AVX-512 kernels). The C kernel
(:mod:`.gram_source`) packs each column chunk of differences into a buffer that stays
in L2 and multiplies it at once in tiles of AVX2 FMA accumulators: at 50 updates of a
2M-parameter float32 model it took about half the CPU time of the numpy path, equally
precise
(``benchmarks/bench_gram_kernel.py``; README, "Benchmarks").

Why it is compiled here and not shipped as a binary: Flower's FABs carry only Python,
TOML, Markdown, YAML and JSON files, and a ServerApp started from a FAB imports the
bundle's ``fairfl`` first, so a binary in the installed wheel would not be found. The
source travels as a Python string; the first process that needs it compiles it with
``$CC`` (else ``cc``, ``gcc`` or ``clang``) into a private cache named by the hash of
the source, the flags and the compiler, and later processes load that file.

``FAIRFL_GRAM_KERNEL`` chooses:

- ``auto`` (default): the kernel where it builds and the CPU has AVX2 and FMA, else
  numpy's path (one warning per process says why; an error of the build or the load is
  such a reason, never an exception);
- ``numpy``: never the kernel;
- ``compiled``: the kernel or an error (CI uses it, so its tests cannot fall back).

The library is kept in fairfl's cache folder (:func:`fairfl._cache.cache_dir`:
``FAIRFL_CACHE_DIR``, else ``$XDG_CACHE_HOME/fairfl``, else ``~/.cache/fairfl``), which
must belong to the user and not be writable by others: a library loaded from it runs in
the server process. Every folder above it must belong to root or the user and be
writable by no one else unless sticky (OpenSSH's ``StrictModes``), so that no one can
swap a folder on the way between the checks and the use; the folder is then walked
and used through descriptors. The library is compiled in a ``mkdtemp`` folder inside it
and moved into place. The library itself is loaded only when it is a regular file (not a
symlink) of this user that group and others may not write, with the SHA-256 recorded
when it was built; anything else at its name is compiled again (:func:`build_and_load`).
Folders and files are created 0700 (the hash file 0600) whatever the umask. With
``FAIRFL_CACHE_DIR=off`` each process compiles it into a temporary folder of its own.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import logging
import os
import platform
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fairfl._cache import CACHE_ENV, PRIVATE_FILE_MODE, cache_dir, is_private
from fairfl.strategies._ops.gram_source import GRAM_SOURCE
from fairfl.strategies._ops.private_files import (
    FOLDER_FLAGS,
    open_private,
    open_private_folder,
    read_private,
)
from fairfl.strategies._ops.sum_kernel import SUM_SOURCE, declare_sums

logger = logging.getLogger(__name__)

#: Environment variable choosing the Gram's path: ``auto``, ``numpy`` or ``compiled``.
MODE_VARIABLE = "FAIRFL_GRAM_KERNEL"
MODES = ("auto", "numpy", "compiled")
#: Compiler flags: the kernel functions carry their own ``target("avx2,fma")``, so the
#: library loads on any x86-64 CPU and says itself whether it can run. No contraction
#: into fused multiply-adds (clang's default): ``weighted_sum_f32`` must round as numpy.
FLAGS = ("-O3", "-std=c11", "-ffp-contract=off", "-shared", "-fPIC")
#: Seconds a compilation may take before the numpy path is used instead.
COMPILE_TIMEOUT_S = 120.0
#: Mode of the compiled library, whatever the umask: this user's only.
LIBRARY_MODE = 0o700

#: The library's whole source: the Gram of :mod:`.gram_source`, and the weighted sum and
#: step of :mod:`.sum_kernel`.
SOURCE = GRAM_SOURCE + SUM_SOURCE


class GramKernelUnavailableError(RuntimeError):
    """``FAIRFL_GRAM_KERNEL=compiled`` was set and the kernel cannot be used here."""


@dataclass(frozen=True)
class GramKernel:
    """The loaded kernel: :meth:`gram` of float32 updates, and the file it came from."""

    library: ctypes.CDLL
    path: Path

    def gram(
        self, centre: NDArray[np.float32], rows: Sequence[NDArray[np.float32]]
    ) -> NDArray[Any]:
        """The symmetric (n, n) float64 matrix of ``⟨row_i − centre, row_j − centre⟩``.

        ``centre`` and every row must be C-contiguous float32 arrays of one size; the
        caller (:func:`fairfl.strategies._ops.gram.gram_matrix`) makes sure of it. A
        NaN/Inf value or a float32 overflow gives non-finite entries, as numpy would.
        """
        n = len(rows)
        out = np.zeros((n, n))
        pointers = (ctypes.c_void_p * n)(*[row.ctypes.data for row in rows])
        # ctypes releases the GIL for the call; the kernel's buffer is per call.
        centre_data, out_data = centre.ctypes.data, out.ctypes.data
        status = self.library.gram_f32(pointers, centre_data, n, centre.size, out_data)
        if status != 0:
            raise MemoryError(f"the compiled Gram kernel could not allocate its buffer ({n} rows)")
        return out + np.triu(out, 1).T  # the kernel fills j >= i only


def gram_kernel() -> GramKernel | None:
    """The compiled kernel, or ``None`` where ``FAIRFL_GRAM_KERNEL`` or the machine rule it out.

    The first call per process builds or loads the library; later calls return it.

    Raises
    ------
    GramKernelUnavailableError
        With ``FAIRFL_GRAM_KERNEL=compiled``, when the kernel cannot be used (the
        message says why).
    ValueError
        If ``FAIRFL_GRAM_KERNEL`` is not one of :data:`MODES`.
    """
    mode = gram_kernel_mode()
    if mode == "numpy":
        return None
    kernel, reason = _load_once()
    if kernel is None and mode == "compiled":
        raise GramKernelUnavailableError(f"{MODE_VARIABLE}=compiled, but {reason}")
    return kernel


def gram_kernel_description(*, with_path: bool = True) -> str:
    """Which path the Gram takes in this process, and why, for a strategy's summary.

    ``with_path=False`` leaves out the kernel's file (benchmarks record the path only).
    """
    mode = gram_kernel_mode()
    if mode == "numpy":
        return f"numpy (BLAS syrk): {MODE_VARIABLE}=numpy"
    kernel, reason = _load_once()
    if kernel is None:
        return f"numpy (BLAS syrk): the compiled kernel is not used, {reason}"
    return f"compiled AVX2 kernel ({kernel.path})" if with_path else "compiled AVX2 kernel"


def gram_kernel_mode() -> str:
    """``FAIRFL_GRAM_KERNEL`` (default ``auto``), checked against :data:`MODES`."""
    mode = os.environ.get(MODE_VARIABLE, "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"{MODE_VARIABLE} must be one of {list(MODES)}, got {mode!r}")
    return mode


_lock = threading.Lock()
_loaded: dict[Path | None, tuple[GramKernel | None, str]] = {}


def _load_once() -> tuple[GramKernel | None, str]:
    """:func:`build_and_load` once per cache folder and process (thread-safe)."""
    configured = cache_dir()
    with _lock:
        if configured not in _loaded:
            folder = configured
            if folder is None:  # FAIRFL_CACHE_DIR=off: a folder of this process only
                folder = Path(tempfile.mkdtemp(prefix="fairfl-gram-kernel-"))
                atexit.register(shutil.rmtree, folder, ignore_errors=True)
            _loaded[configured] = build_and_load(folder)
            kernel, reason = _loaded[configured]
            if kernel is None and gram_kernel_mode() == "auto":
                logger.warning("FedMGDA+'s Gram and the weighted sum run in numpy: %s", reason)
        return _loaded[configured]


def build_and_load(folder: Path) -> tuple[GramKernel | None, str]:
    """Load the kernel from ``folder``, compiling it there first if needed.

    ``folder`` is used only when no one but this user (or root) can swap it or any
    folder above it (:func:`~fairfl.strategies._ops.private_files.open_private_folder`,
    the check of OpenSSH's ``StrictModes``); it is then reached through a descriptor,
    never by its path again.
    A library found in it is loaded only when it is ours: a regular file (not a
    symlink), owned by this user, not writable by group or others, and with the SHA-256
    recorded next to it when it was built (a sidecar file that passes the same checks).
    Otherwise (missing, planted, damaged, or from an older build) it is compiled again
    in a private ``mkdtemp`` scratch folder and moved into place, and that file is
    loaded after the same checks against the hash of what this process built.

    Returns
    -------
    tuple[GramKernel | None, str]
        The kernel and ``""``, or ``None`` and the reason it cannot be used: every error
        of the build or the load is a reason (the caller falls back to numpy or, with
        ``FAIRFL_GRAM_KERNEL=compiled``, raises it), never an exception.
    """
    try:
        return _build_and_load(folder)
    except Exception as error:  # a kernel that fails must not end aggregation
        return None, (
            f"building or loading it in {folder} failed "
            f"({type(error).__name__}: {error}); set {CACHE_ENV} to a private folder"
        )


def _build_and_load(folder: Path) -> tuple[GramKernel | None, str]:
    """:func:`build_and_load`, whose errors its caller turns into a reason."""
    machine = platform.machine()
    if machine.lower() not in ("x86_64", "amd64") or not sys.platform.startswith(
        ("linux", "darwin")
    ):
        return None, f"it is built on x86-64 Linux and macOS only, not {sys.platform} {machine}"
    compiler = os.environ.get("CC") or next(
        filter(None, map(shutil.which, ("cc", "gcc", "clang"))), None
    )
    if compiler is None:
        return None, "no C compiler was found ($CC, cc, gcc or clang)"
    try:
        version = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as error:
        return None, f"the C compiler {compiler} does not run ({error})"
    folder_fd, problem = open_private_folder(folder)
    if folder_fd is None:
        return None, problem
    try:
        digest = hashlib.sha256("\0".join([SOURCE, *FLAGS, compiler, version]).encode())
        library = folder / f"gram-kernel-{digest.hexdigest()[:24]}.so"
        recorded = read_private(folder_fd, _sidecar(library).name)
        handle, _ = _load_checked(folder_fd, library, recorded.decode("ascii", "replace").strip())
        if handle is None:  # missing, not ours, or not what was built: built afresh
            problem, built = _compile(compiler, folder_fd, library)
            if problem:
                return None, problem
            handle, problem = _load_checked(folder_fd, library, built)
            if handle is None:
                return None, f"{problem}; set {CACHE_ENV} to a private folder"
    finally:
        os.close(folder_fd)
    handle.gram_kernel_usable.restype = ctypes.c_int
    if not handle.gram_kernel_usable():
        return None, "this CPU lacks AVX2 or FMA"
    handle.gram_f32.argtypes = [
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int64,
        ctypes.c_void_p,
    ]
    handle.gram_f32.restype = ctypes.c_int
    declare_sums(handle)
    return GramKernel(handle, library), ""


def _sidecar(library: Path) -> Path:
    """The file holding the SHA-256 of ``library`` as it was built."""
    return library.with_suffix(".sha256")


def _load_checked(folder_fd: int, library: Path, digest: str) -> tuple[ctypes.CDLL | None, str]:
    """Load ``library`` if it is a private regular file of ours whose SHA-256 is ``digest``.

    The file is opened in the checked folder's descriptor; on Linux it is loaded through
    the descriptor that was checked (``/proc/self/fd``), elsewhere by its path, in
    folders only this user or root may change. Returns the handle and ``""``, or
    ``None`` and the reason it was not loaded.
    """
    fd, problem = open_private(folder_fd, library.name)
    if fd is None:
        return None, f"{library.parent}/{problem}"
    try:
        content = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            content.update(chunk)
        if not digest or content.hexdigest() != digest:
            return None, f"{library} is not the library this process built or recorded"
        by_descriptor = Path(f"/proc/self/fd/{fd}")
        name = str(by_descriptor if by_descriptor.exists() else library)
        try:
            return ctypes.CDLL(name), ""
        except OSError as error:
            return None, f"{library} does not load ({error})"
    finally:
        os.close(fd)


def _compile(compiler: str, folder_fd: int, library: Path) -> tuple[str, str]:
    """Compile :data:`SOURCE` to ``library`` atomically, its hash recorded next to it.

    The compiler runs in a ``mkdtemp`` folder (0700) inside the checked cache folder;
    its output is opened there without following links and checked like a cached
    library, and is moved into place by descriptor (``rename`` within one folder, so
    atomic).

    Returns
    -------
    tuple[str, str]
        A reason it failed and ``""``, or ``""`` and the library's SHA-256.
    """
    scratch = Path(tempfile.mkdtemp(dir=library.parent, prefix=".build-"))
    try:
        scratch_fd = os.open(scratch, FOLDER_FLAGS)
        try:
            return _compile_in(compiler, folder_fd, scratch, scratch_fd, library)
        finally:
            os.close(scratch_fd)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _compile_in(
    compiler: str, folder_fd: int, scratch: Path, scratch_fd: int, library: Path
) -> tuple[str, str]:
    """:func:`_compile`'s work in the open scratch folder ``scratch_fd``."""
    if not is_private(os.fstat(scratch_fd)):
        return f"the scratch folder {scratch} is not private to this user", ""
    source = os.open(
        "gram_kernel.c",
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
        0o600,
        dir_fd=scratch_fd,
    )
    with os.fdopen(source, "w", encoding="utf-8") as file:
        file.write(SOURCE)
    # Relative names (cwd=scratch): no scratch path ends up in the library, so the
    # processes that build it at once build the same bytes.
    argv = [compiler, *FLAGS, "-o", library.name, "gram_kernel.c"]
    try:
        done = subprocess.run(
            argv, cwd=scratch, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError) as error:
        return f"compiling it failed ({error})", ""
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return f"compiling it with {compiler} failed: {' | '.join(tail)}", ""
    try:
        fd = os.open(library.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=scratch_fd)
        with os.fdopen(fd, "rb") as built:
            # The compiler's output gets 0777 & ~umask: set to this user's only.
            os.fchmod(built.fileno(), LIBRARY_MODE)
            if not stat.S_ISREG(os.fstat(built.fileno()).st_mode):
                return f"the compiler's output {library.name} is not a regular file", ""
            digest = hashlib.sha256(built.read()).hexdigest()
        recorded = _sidecar(library).name
        fd = os.open(
            recorded,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
            PRIVATE_FILE_MODE,
            dir_fd=scratch_fd,
        )
        with os.fdopen(fd, "w", encoding="ascii") as file:
            os.fchmod(file.fileno(), PRIVATE_FILE_MODE)
            file.write(digest + "\n")
        # Another process may have finished first: replacing its files is harmless.
        # The hash first: a reader between the two moves sees a mismatch and rebuilds.
        for name in (recorded, library.name):
            os.replace(name, name, src_dir_fd=scratch_fd, dst_dir_fd=folder_fd)
    except OSError as error:
        return f"the kernel cannot be stored as {library} ({error}); set {CACHE_ENV}", ""
    logger.info("Compiled FedMGDA+'s Gram kernel: %s", library)
    return "", digest
