"""fla's Triton autotuners, made cheap: trimmed to one config for correctness runs, or pinned to
the winners of a full autotune for timing runs.

A fresh machine autotunes every fla kernel the first time it meets a key (about 100 s for the WY
kernel alone, minutes for a KDA layer). Correctness does not depend on the tuning, so the tests
trim every autotuner to its first config (Triton's Autotuner then runs that config without
benchmarking); the bench pins the tuned winners recorded in ../shared/fla_best_configs_h200.json.
"""

import json
import sys


def _autotuner_type():
    from triton.runtime.autotuner import Autotuner

    return Autotuner


def fla_autotuners():
    """Every triton Autotuner reachable from the globals of the loaded fla modules, once each
    (under @triton.heuristics the Autotuner is the decorator's `.fn`)."""
    autotuner = _autotuner_type()
    seen = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "fla" or name.startswith("fla.")):
            continue
        for value in list(vars(module).values()):
            node, depth = value, 0
            while node is not None and depth < 4:
                if isinstance(node, autotuner):
                    seen[id(node)] = node
                    break
                node, depth = getattr(node, "fn", None), depth + 1
    return list(seen.values())


def trim_fla_autotuners(keep=()):
    """Keeps only the first config of every loaded fla autotuner but those whose kernel function
    is named in `keep` (they autotune as fla ships them); returns how many were trimmed. Call it
    after importing the fla modules whose kernels will run."""
    trimmed = 0
    for tuner in fla_autotuners():
        if tuner.base_fn.__name__ in keep:
            continue
        tuner.configs = tuner.configs[:1]
        tuner.cache.clear()
        trimmed += 1
    return trimmed


def load_pins(path):
    """The entries of a fla_best_configs JSON file (see ../shared/fla_best_configs_h200.json)."""
    with open(path) as f:
        return json.load(f)["entries"]


def find_pin(entries, kernel, **key):
    """The config of the entry for `kernel` whose key fields (BT, HV, X, beta, h, varlen,
    state_v_first) equal `key`, or None."""
    for entry in entries:
        if entry["kernel"] == kernel and all(entry.get(k) == v for k, v in key.items()):
            return entry["config"]
    return None


def pin(tuner, config):
    """Makes `tuner` run `config` ({'BK':.., 'BV':.., 'num_warps':.., 'num_stages':..}) without
    benchmarking: the tuner's own config with those values when it has one, else a new one."""
    import triton

    kwargs = {k: v for k, v in config.items() if k not in ("num_warps", "num_stages")}

    def matches(c):
        return (c.kwargs == kwargs and c.num_warps == config["num_warps"]
                and c.num_stages == config["num_stages"])

    if not hasattr(tuner, "all_configs"):
        tuner.all_configs = list(tuner.configs)  # so later pins can find the originals
    found = [c for c in tuner.all_configs if matches(c)]
    chosen = found[0] if found else triton.Config(
        kwargs, num_warps=config["num_warps"], num_stages=config["num_stages"])
    tuner.configs = [chosen]
    tuner.cache.clear()
    return chosen
