"""The fla functions that kda_kernels.chunk_kda still runs: the layer's forward and the backward
stages this library has no kernel for yet (the recompute of w/u, the forward and reverse state
scans, dAv, the reverse cumsum of dg, the gate's, l2norm's and the beta sigmoid's backward).

They are taken from the two fla modules that use them, ``fla.ops.kda.chunk`` and
``fla.ops.kda.chunk_bwd``, whose names are the same in fla 0.5.2 and 0.6.x (the modules they
come from moved: l2norm is ``fla.modules.l2norm`` in 0.5.2 and ``fla.modules.norm.l2norm`` in
0.6), and are called only with the keywords both releases take.
"""

import importlib
import importlib.util
import types

from . import _fla_release

# Name -> the fla module that holds it (imported there from wherever the release keeps it).
_PIECES = {
    "fla.ops.kda.chunk": ("chunk_kda_fwd", "l2norm_fwd", "l2norm_bwd", "fused_beta_sigmoid",
                          "fused_beta_sigmoid_bwd", "prepare_chunk_indices"),
    "fla.ops.kda.chunk_bwd": ("kda_gate_chunk_cumsum", "recompute_w_u_fwd",
                              "chunk_gated_delta_rule_fwd_h", "chunk_kda_bwd_dAv",
                              "chunk_gated_delta_rule_bwd_dhu", "chunk_local_cumsum",
                              "kda_gate_bwd", "RCP_LN2"),
}

_loaded = None


def load():
    """The pieces as one namespace; ImportError (naming what is missing and the supported
    releases) when fla is absent or lacks one of them."""
    global _loaded
    if _loaded is not None:
        return _loaded
    if importlib.util.find_spec("fla") is None:
        raise ImportError(
            "kda_kernels.chunk_kda runs fla's forward and the backward stages kda_kernels has "
            "no kernel for yet, and flash-linear-attention (fla) is not installed "
            f"(kda_kernels supports {_fla_release.SUPPORTED}: pip install "
            "flash-linear-attention)")
    pieces = {}
    for module_name, names in _PIECES.items():
        module = importlib.import_module(module_name)
        missing = [name for name in names if not hasattr(module, name)]
        if missing:
            import fla

            raise _fla_release.FlaUnsupportedError(
                f"kda_kernels.chunk_kda: fla {getattr(fla, '__version__', '?')} lacks "
                f"{', '.join(missing)} in {module_name}; kda_kernels supports "
                f"{_fla_release.SUPPORTED}")
        pieces.update((name, getattr(module, name)) for name in names)
    _loaded = types.SimpleNamespace(**pieces)
    return _loaded
