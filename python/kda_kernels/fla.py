"""Makes flash-linear-attention's chunk_kda backward call kda_kernels.

fla dispatches ``chunk_kda_bwd_wy_dqkg_fused`` (fla/ops/kda/chunk_bwd.py, decorated
``@dispatch('kda')``) through its KDA backend registry: for each call it walks the registered
backends by priority and takes the first whose verifier accepts the call and that implements the
function; if none does, fla's own Triton kernel runs. ``enable()`` registers a backend that
implements only that function, so every other KDA function keeps its usual path, and whose
verifier hands back to fla every call this library has no kernel for.

fla is optional: it is imported by ``enable()``, not by ``import kda_kernels``.

Examples
--------
>>> import kda_kernels.fla
>>> kda_kernels.fla.enable()     # doctest: +SKIP
>>> o, _ = fla.ops.kda.chunk_kda(q, k, v, g, beta)   # backward now runs our CUDA kernel
>>> kda_kernels.fla.disable()    # doctest: +SKIP
"""

import threading

from . import _api

BACKEND_TYPE = "kda_kernels"
# fla: lower runs first. 1 puts this ahead of fla's optional GPU backends (flash_kda 3,
# tilelang 5); 0 belongs to the Ascend backend, which is only available on NPUs.
PRIORITY = 1
# What libkda has kernels for; anything else goes back to fla (SPEC.md).
_X_DTYPES = ("float16", "bfloat16", "float32")
_CHUNK_SIZES = (16, 32, 64)
_MAX_HEAD_DIM = 256

_lock = threading.Lock()
_backend_class = None


def _name(dtype):
    return str(dtype).replace("torch.", "")


def _unsupported_reason(q, k, v, v_new, g, beta, A, h, do, dh, dv, chunk_size):
    """Why libkda's cuda backend cannot take this call, or None when it can.

    This is a capability gate, not validation: it sends fla the cases we have no kernel for;
    malformed arguments still reach the core, which validates them and raises. It runs on every
    backward step, so the accepting path compares dtype objects and builds no strings.
    """
    import torch

    tensors = dict(q=q, k=k, v=v, v_new=v_new, g=g, beta=beta, A=A, h=h, do=do, dh=dh, dv=dv)
    x = q.dtype
    if x not in (torch.float16, torch.bfloat16, torch.float32):
        return f"q has dtype {_name(x)}; kda_kernels has kernels for {', '.join(_X_DTYPES)}"
    for name in ("k", "v", "v_new", "A", "do", "dv"):
        if tensors[name].dtype != x:
            return f"{name} has dtype {_name(tensors[name].dtype)}, q has {_name(x)}"
    if g.dtype != torch.float32:
        return f"g has dtype {_name(g.dtype)}; kda_kernels needs float32"
    if beta.dtype != x and beta.dtype != torch.float32:
        return f"beta has dtype {_name(beta.dtype)}; kda_kernels needs {_name(x)} or float32"
    if (h.dtype != x and h.dtype != torch.float32) or dh.dtype != h.dtype:
        return (f"h, dh have dtypes {_name(h.dtype)}, {_name(dh.dtype)}; "
                f"need float32 or {_name(x)}")
    if q.shape[-1] > _MAX_HEAD_DIM or v.shape[-1] > _MAX_HEAD_DIM:
        return f"K={q.shape[-1]}, V={v.shape[-1]}; kda_kernels has kernels up to {_MAX_HEAD_DIM}"
    if chunk_size not in _CHUNK_SIZES:
        return f"chunk_size={chunk_size}; kda_kernels has kernels for {_CHUNK_SIZES}"
    device = q.device
    for name, t in tensors.items():
        if t.device != device or device.type != "cuda":
            return f"{name} is on {t.device}; kda_kernels takes CUDA tensors on q's device"
    return None


def _make_backend_class(base_class=None):
    """The backend class, derived from fla's BaseBackend (or from `base_class`, for tests and the
    host-cost bench that run without fla)."""
    import torch

    if base_class is None:
        from fla.ops.backends import BaseBackend as base_class

    from . import _torch_op  # fla brings torch; plain `import kda_kernels.fla` does not need it

    class KdaKernelsBackend(base_class):
        """fla KDA backend running chunk_kda_bwd_wy_dqkg_fused on kda_kernels' CUDA kernel."""

        backend_type = BACKEND_TYPE
        package_name = None  # this module is loaded already; nothing to look for
        env_var = None  # enable()/disable() are the switch
        priority = PRIORITY

        # fla calls with keywords, in its own parameter order: state_v_first before
        # cu_seqlens. **kwargs keeps a future extra keyword from breaking the call.
        def chunk_kda_bwd_wy_dqkg_fused_verifier(self, q, k, v, v_new, g, beta, A, h, do, dh,
                                                 dv, scale=None, state_v_first=False,
                                                 cu_seqlens=None, chunk_size=64,
                                                 chunk_indices=None, **kwargs):
            if kwargs:
                return False, f"unknown arguments {sorted(kwargs)}"
            for name, t in (("cu_seqlens", cu_seqlens), ("chunk_indices", chunk_indices)):
                if t is not None and not isinstance(t, torch.Tensor):
                    return False, f"{name} is a {type(t).__name__}, not a torch.Tensor"
                if t is not None and t.device != q.device:
                    return False, f"{name} is on {t.device}, q on {q.device}"
            reason = _unsupported_reason(q, k, v, v_new, g, beta, A, h, do, dh, dv, chunk_size)
            return reason is None, reason

        def chunk_kda_bwd_wy_dqkg_fused(self, q, k, v, v_new, g, beta, A, h, do, dh, dv,
                                        scale=None, state_v_first=False, cu_seqlens=None,
                                        chunk_size=64, chunk_indices=None, **kwargs):
            # The custom op's implementation, called directly: fla's dispatch is
            # torch.compiler.disable'd, so this always runs eagerly on plain CUDA tensors (the
            # verifier saw them), where the op's dispatch (~40 us of host time a call) buys
            # nothing; fla's own Triton launch is likewise invisible to torch's dispatcher.
            return _torch_op._run(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, cu_seqlens,
                                  chunk_size, chunk_indices, state_v_first, None)

    return KdaKernelsBackend


def _registry():
    try:
        import fla.ops.backends as fla_backends
        from fla.ops.kda.backends import kda_registry
    except ImportError as e:
        raise ImportError(f"kda_kernels.fla needs flash-linear-attention (fla): {e}") from e
    if fla_backends._DISPATCH_DISABLED:
        raise RuntimeError(
            "fla's backend dispatch is off (FLA_DISABLE_BACKEND_DISPATCH=1), so fla would never "
            "call kda_kernels; unset it to use kda_kernels.fla"
        )
    return kda_registry


def enable():
    """Register kda_kernels as a backend of fla's KDA operations.

    From then on fla's ``chunk_kda_bwd_wy_dqkg_fused`` (the step inside ``chunk_kda``'s backward)
    runs on kda_kernels' CUDA kernel whenever the call is one it has a kernel for (CUDA tensors,
    X in float16/bfloat16/float32, K, V <= 256, chunk_size 16/32/64); other calls run fla's
    Triton kernel as before. Calling it again is harmless.

    Raises
    ------
    ImportError
        fla is not installed.
    RuntimeError
        The loaded libkda has no usable CUDA backend (it was built without nvcc, or no GPU is
        present), libkda was not found, or fla's dispatch is disabled.
    """
    global _backend_class
    registry = _registry()
    if not _api.backend_available("cuda"):
        raise RuntimeError(
            f"kda_kernels.fla.enable(): the cuda backend is not available in "
            f"{_api.library_path()} (built without CUDA, or no GPU present)"
        )
    with _lock:
        if _backend_class is None:
            _backend_class = _make_backend_class()
        registry.register(_backend_class())


def disable():
    """Remove kda_kernels from fla's KDA backends; fla's own kernels run again. Harmless when
    not enabled."""
    registry = _registry()
    # fla's registry has no unregister: remove ours and let it pick its active backend afresh.
    with registry._lock:
        registry._backends.pop(BACKEND_TYPE, None)
        registry._active = None
        registry._update_active_backend()


def is_enabled():
    """Whether kda_kernels is registered with fla (False when fla is not installed)."""
    try:
        registry = _registry()
    except (ImportError, RuntimeError):
        return False
    return BACKEND_TYPE in registry._backends
