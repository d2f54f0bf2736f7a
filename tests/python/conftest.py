"""Shared by the Python package's tests, which run under mpirun at 1 to 4 ranks (CTest starts
`mpirun -np P python3 -m pytest tests/python`): every rank runs every test, in the same order,
so each test's collectives meet. Data comes from a fresh seed per run, chosen by rank 0 and
printed, so a failure can be replayed (COFUSE_TEST_SEED=...)."""
import os
import time

import numpy as np
import pytest
from mpi4py import MPI

import cofuse  # the package under test (it imports mpi4py.MPI)

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
RANK = COMM.Get_rank()


def _run_seed():
    seed = int(os.environ.get("COFUSE_TEST_SEED", "0")) or (time.time_ns() % (1 << 31))
    return COMM.bcast(seed, root=0)


SEED = _run_seed()


def pytest_report_header(config):
    return f"cofuse Python tests: {P} ranks, seed {SEED} (COFUSE_TEST_SEED={SEED} replays it)"


def pytest_configure(config):
    if RANK != 0:  # one rank's report is enough; the others say only what fails
        config.option.verbose = -1


@pytest.fixture(autouse=True)
def deadline(request):
    # A rank whose test failed may skip a collective its peers then wait in forever: each test
    # runs under a deadline that aborts the job (exit 124) with the test's name instead.
    with cofuse.deadline(COMM, float(os.environ.get("COFUSE_TEST_DEADLINE_S", "300")), request.node.nodeid):
        yield


@pytest.fixture
def comm():
    return COMM


@pytest.fixture
def rng(request):
    # A generator per test, the same on every rank (whole matrices are drawn alike everywhere).
    return np.random.default_rng([SEED, sum(map(ord, request.node.name))])


def uniform(rng, shape, dtype):
    """Uniform in [-1, 1): never zeros."""
    return (rng.random(shape) * 2 - 1).astype(dtype)


def tolerance(dtype, k):
    """cofuse's tolerance (op_desc.hpp): 8 epsilons times (sqrt(k) + 4), relative Frobenius."""
    return 8 * np.finfo(dtype).eps * (np.sqrt(k) + 4)


def assert_close(got, want, k, dtype):
    """got (numpy or torch) against a float64 reference, within the tolerance of dtype."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    error = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300)
    assert error <= tolerance(dtype, k), f"relative error {error:.3g} > {tolerance(dtype, k):.3g} (seed {SEED})"
