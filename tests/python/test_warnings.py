"""What the C++ core warns about reaches a Python caller as a cofuse.CofuseWarning: here online
tuning that cannot record its winner (the database's directory is a character device)."""
import warnings

import numpy as np
import pytest

import cofuse
from conftest import P, RANK


def test_a_warning_inside_tuning_reaches_the_python_caller(comm, rng, monkeypatch):
    monkeypatch.setenv("COFUSE_AUTOTUNE_CALLS", "4")
    monkeypatch.setenv("COFUSE_TUNING_DB", "/dev/null/cofuse-tuning.json")  # its parent is no directory
    m, n, k = 128 * P, 128, 64 * P
    a = rng.standard_normal((m, k // P)).astype(np.float32)
    b = rng.standard_normal((k // P, n)).astype(np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with cofuse.Operation("gemm_rs", m, n, k, comm, profile="this-host-shm") as op:
            if op.decided_by != "tuning":
                pytest.skip(f"nothing to measure: {op.explain()}")
            while op.decided_by == "tuning":
                op(a, b)
            assert op.decided_by == "measurement"
    ours = [w for w in caught if issubclass(w.category, cofuse.CofuseWarning)]
    if RANK == 0:  # only rank 0 writes the database, so only rank 0 can fail to
        assert any("was not recorded in /dev/null/cofuse-tuning.json" in str(w.message) for w in ours), \
            [str(w.message) for w in caught]
        assert all(str(w.message).startswith("[tune] ") for w in ours)
    else:
        assert not ours, [str(w.message) for w in ours]
