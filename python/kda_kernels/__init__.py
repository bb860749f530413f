"""kda-kernels: KDA chunk-backward operators for PyTorch (CPU and CUDA tensors, torch.compile,
CUDA graphs) and NumPy, with fla's signatures: chunk_kda_bwd_wy_dqkg_fused and
chunk_kda_bwd_intra. Torch tensors go through the custom ops torch.ops.kda_kernels.*, compiled
(libkda_torch, calling libkda's C++ API) where that library was built for this torch, else
registered from Python over libkda's C ABI (ctypes): see torch_op_backend(). NumPy arrays go
through the C ABI.

libkda is looked for in $KDA_LIBRARY, else the copy bundled in this package, else a build in the
source checkout (build*/src/). Importing loads it only when torch is present and the compiled
ops sit beside it (they link it); otherwise the first call does, and a missing libkda is an
error then, never at import. ``kda_kernels.chunk_kda`` is a whole KDA layer for training
(fla's call; needs torch and fla). ``kda_kernels.fla.enable()`` makes flash-linear-attention's
chunk_kda train through it.
"""

from . import _api, _signatures
from ._api import backend_available, chunk_indices, library_path, torch_op_backend
from ._library import LibraryError

# One public function per operator of libkda's tables, named as fla names it.
for _sig in _signatures.SIGNATURES:
    globals()[_sig.fla_name] = getattr(_api, _sig.fla_name)

__all__ = ["LibraryError", "backend_available", "chunk_indices", "chunk_kda", "library_path",
           "torch_op_backend"] + [_sig.fla_name for _sig in _signatures.SIGNATURES]


def __getattr__(name):
    # chunk_kda needs torch, which `import kda_kernels` does not.
    if name == "chunk_kda":
        from ._layer import chunk_kda

        return chunk_kda
    # __version__ is libkda's own version (kda_version()), so it loads the library on first use.
    if name == "__version__":
        from ._api import version

        return version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
