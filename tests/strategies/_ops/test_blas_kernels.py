"""The advice to run OpenBLAS's Haswell kernels: when it is given, and that it works."""

import logging
import os
import platform
import subprocess
import sys

import pytest
from threadpoolctl import threadpool_info

from fairfl.strategies import FedAvgN, FedMGDAPlus, fedmgda
from fairfl.strategies._ops import blas
from fairfl.strategies._ops.blas import (
    cpu_vendor_family,
    numpy_openblas_kernels,
    openblas_kernel_advice,
)

pytestmark = pytest.mark.flower_free  # no Flower API: not run again under the oldest flwr

# /proc/cpuinfo's first lines, as Linux writes them (two CPUs: only the first is read).
ZEN4 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n\n"
SKYLAKE = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\n\n"
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (ZEN4 + SKYLAKE, ("AuthenticAMD", 25)),
        (SKYLAKE + ZEN4, ("GenuineIntel", 6)),
        (ARM, None),
        ("", None),
    ],
)
def test_cpu_vendor_family_reads_the_first_cpu(tmp_path, text, expected):
    path = tmp_path / "cpuinfo"
    path.write_text(text, encoding="utf-8")
    assert cpu_vendor_family(str(path)) == expected


def test_cpu_vendor_family_without_the_file_is_none(tmp_path):
    assert cpu_vendor_family(str(tmp_path / "missing")) is None


@pytest.mark.parametrize(
    ("kernels", "cpu", "coretype", "advised"),
    [
        ("SkylakeX", ("AuthenticAMD", 25), None, True),
        ("Cooperlake", ("AuthenticAMD", 25), None, True),
        ("SkylakeX", ("AuthenticAMD", 25), "SkylakeX", False),  # the operator chose
        ("Haswell", ("AuthenticAMD", 25), None, False),  # already AVX2 kernels
        ("Zen", ("AuthenticAMD", 25), None, False),
        ("SkylakeX", ("AuthenticAMD", 26), None, False),  # Zen 5: full-width, unmeasured
        ("SkylakeX", ("GenuineIntel", 6), None, False),  # 512-bit units: its own kernels
        (None, ("AuthenticAMD", 25), None, False),  # not OpenBLAS
        ("SkylakeX", None, None, False),  # CPU unknown
    ],
)
def test_advice_only_for_avx512_kernels_on_zen4_without_a_choice(
    monkeypatch, kernels, cpu, coretype, advised
):
    monkeypatch.setattr(blas, "numpy_openblas_kernels", lambda: kernels)
    monkeypatch.setattr(blas, "cpu_vendor_family", lambda: cpu)
    if coretype is None:
        monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_CORETYPE", coretype)
    advice = openblas_kernel_advice()
    assert (advice is not None) is advised
    if advised:
        assert kernels in advice and "OPENBLAS_CORETYPE=Haswell" in advice


def test_numpy_kernels_are_those_threadpoolctl_reports_for_numpy():
    pools = [p for p in threadpool_info() if p["user_api"] == "blas"]
    bundled = [p for p in pools if "numpy" in p["filepath"]] or pools
    expected = (
        bundled[0].get("architecture")
        if bundled and bundled[0]["internal_api"] == "openblas"
        else None
    )
    assert numpy_openblas_kernels() == expected


def test_numpy_pool_wins_over_a_blas_listed_before_it(monkeypatch):
    import threadpoolctl

    scipy_pool = {"user_api": "blas", "internal_api": "openblas", "architecture": "Haswell"}
    scipy_pool["filepath"] = "/venv/site-packages/scipy.libs/libscipy_openblas.so"
    numpy_pool = {"user_api": "blas", "internal_api": "openblas", "architecture": "SkylakeX"}
    numpy_pool["filepath"] = "/venv/site-packages/numpy.libs/libscipy_openblas64_.so"
    openmp = {"user_api": "openmp", "internal_api": "openmp", "filepath": "/numpy/libgomp.so"}
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: [openmp, scipy_pool, numpy_pool])
    assert numpy_openblas_kernels() == "SkylakeX"
    mkl = {"user_api": "blas", "internal_api": "mkl", "filepath": "/conda/lib/libmkl_rt.so"}
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: [mkl])
    assert numpy_openblas_kernels() is None  # not OpenBLAS: no kernels to name
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: [openmp])
    assert numpy_openblas_kernels() is None  # no BLAS loaded


@pytest.mark.skipif(
    platform.machine() != "x86_64" or numpy_openblas_kernels() is None,
    reason="OpenBLAS's x86 kernel choice",
)
def test_the_advised_variable_selects_the_haswell_kernels():
    code = (
        "import numpy\n"
        "from fairfl.strategies._ops.blas import numpy_openblas_kernels\n"
        "print(numpy_openblas_kernels())\n"
    )
    env = {**os.environ, "OPENBLAS_CORETYPE": "Haswell"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "Haswell"


def test_gram_rules_log_the_advice_in_their_summary_when_numpy_forms_the_gram(monkeypatch, caplog):
    monkeypatch.setattr(blas, "numpy_openblas_kernels", lambda: "SkylakeX")
    monkeypatch.setattr(blas, "cpu_vendor_family", lambda: ("AuthenticAMD", 25))
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", "numpy")
    with caplog.at_level(logging.INFO, logger="fairfl"):
        FedMGDAPlus().summary()
    assert sum("OPENBLAS_CORETYPE=Haswell" in r.message for r in caplog.records) == 1
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="fairfl"):
        FedAvgN().summary()  # ε = 0: norms only, no Gram
    assert not any("OPENBLAS_CORETYPE" in r.message for r in caplog.records)


def test_no_advice_is_logged_where_it_does_not_apply(monkeypatch, caplog):
    monkeypatch.setattr(blas, "numpy_openblas_kernels", lambda: "Haswell")
    with caplog.at_level(logging.INFO, logger="fairfl"):
        FedMGDAPlus().summary()
    assert not any("OPENBLAS_CORETYPE" in r.message for r in caplog.records)


def test_no_advice_is_logged_when_the_compiled_kernel_forms_the_gram(monkeypatch, caplog):
    monkeypatch.setattr(blas, "numpy_openblas_kernels", lambda: "SkylakeX")
    monkeypatch.setattr(blas, "cpu_vendor_family", lambda: ("AuthenticAMD", 25))
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    monkeypatch.setattr(fedmgda, "gram_kernel", lambda: object())
    with caplog.at_level(logging.INFO, logger="fairfl"):
        FedMGDAPlus().summary()
    assert not any("OPENBLAS_CORETYPE" in r.message for r in caplog.records)
