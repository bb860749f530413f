"""kda-kernels: KDA chunk-backward operators for PyTorch (CPU and CUDA tensors, torch.compile,
CUDA graphs) and NumPy, through libkda's C ABI (ctypes), with fla's signatures:
chunk_kda_bwd_wy_dqkg_fused and chunk_kda_bwd_intra.

Importing never loads libkda; the first call does, from $KDA_LIBRARY, else the copy bundled in
this package, else a build in the source checkout (build*/src/). ``kda_kernels.fla.enable()``
makes flash-linear-attention's chunk_kda backward use these operators.
"""

from ._api import (
    backend_available,
    chunk_indices,
    chunk_kda_bwd_intra,
    chunk_kda_bwd_wy_dqkg_fused,
    library_path,
)
from ._library import LibraryError

__all__ = [
    "LibraryError",
    "backend_available",
    "chunk_indices",
    "chunk_kda_bwd_intra",
    "chunk_kda_bwd_wy_dqkg_fused",
    "library_path",
]


def __getattr__(name):
    # __version__ is libkda's own version (kda_version()), so it loads the library on first use.
    if name == "__version__":
        from ._api import version

        return version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
