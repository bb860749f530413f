"""A pytest plugin that runs a peer's test suite (fla's own tests/ops/test_kda.py, from fla's
repository) with kda_kernels' fla backend enabled, so that every chunk_kda backward in it goes
through our kernels wherever our verifiers take the call:

    PYTHONPATH=<fla release>:<kda_kernels>:tests/python \\
        python -m pytest -p fla_peer_plugin <fla checkout>/tests/ops/test_kda.py

It enables the backend once fla's modules are imported, trims fla's autotuners to one config
each (correctness does not depend on fla's tuning, and a fresh machine otherwise autotunes for
minutes), counts the calls fla's dispatch makes to each of our functions, and prints the counts
at the end, each process's counts also written to $KDA_PEER_CALLS_DIR (when set) as JSON. A run
in one process in which our backend took no call fails: it would have tested fla alone.
"""

import json
import os

_calls = {}  # by our backend's function name, a list with an entry per call


def _record_calls():
    """Records the calls fla's dispatch makes to the registered backend (record_calls)."""
    from kda_testing import record_calls

    import kda_kernels.fla as kfla

    backend_class = type(kfla._release().registered(kfla.BACKEND_TYPE))
    # chunk_kda (the layer) and the stage functions, for the calls chunk_kda hands back.
    calls, _ = record_calls(backend_class, list(kfla._functions()))
    _calls.update(calls)


def _counts():
    return {name: len(calls) for name, calls in _calls.items()}


def _backend_wanted():
    """KDA_PEER_BACKEND=0 runs the peer's tests on fla alone (trimmed the same way): the
    baseline that tells a failure of fla's own from one of ours."""
    return os.environ.get("KDA_PEER_BACKEND", "1") != "0"


def pytest_configure(config):
    import fla.ops.kda  # noqa: F401  (fla's KDA registry and stage functions)

    if _backend_wanted():
        import kda_kernels.fla as kfla

        kfla.enable()
        _record_calls()


def pytest_collection_finish(session):
    from fla_tuning import trim_fla_autotuners

    trim_fla_autotuners()  # after the test modules imported the fla kernels they run


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    import fla

    what = json.dumps(_counts()) if _backend_wanted() else "none (KDA_PEER_BACKEND=0: fla alone)"
    terminalreporter.write_line(
        f"kda_kernels backend calls under fla {fla.__version__}'s tests: {what}")


def pytest_sessionfinish(session, exitstatus):
    where = os.environ.get("KDA_PEER_CALLS_DIR")
    if where:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(os.path.join(where, f"calls-{worker}.json"), "w") as f:
            json.dump(_counts(), f)
    # Under pytest-xdist the calls happen in the workers: the files above hold them.
    distributed = getattr(session.config.option, "numprocesses", None)
    if (_backend_wanted() and not distributed and session.testscollected
            and not any(_counts().values())):
        session.exitstatus = 1  # our backend never ran: this tested fla alone
