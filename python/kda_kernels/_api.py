"""The public functions. Torch tensors go through the registered custom op; NumPy arrays go to
the CPU backends directly."""

from . import _abi, _library, _numpy_path

try:
    import torch
except ImportError:  # torch is optional: the NumPy path needs only numpy
    torch = None

# torch.library.custom_op arrived in torch 2.4; older torch gets a clear error on use.
_TORCH_OP = torch is not None and hasattr(torch.library, "custom_op")
if _TORCH_OP:
    from . import _torch_op


def _is_torch_tensor(x):
    return torch is not None and isinstance(x, torch.Tensor)


def chunk_kda_bwd_wy_dqkg_fused(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale=None,
                                cu_seqlens=None, chunk_size=64, chunk_indices=None,
                                state_v_first=False, *, backend=None):
    """KDA chunk backward through the WY representation: gradients dq, dk, dv, db, dg, dA.

    The contract is SPEC.md's (the same as flash-linear-attention 0.5.2's Triton kernel of this
    name). X below is one of float16, bfloat16, float32, the same for every X tensor. Arguments
    are validated once, in libkda; a bad one raises an exception whose message names it.

    Parameters
    ----------
    q, k : array, shape [B, T, H, K], dtype X
        Queries and keys (K <= 256).
    v, v_new : array, shape [B, T, HV, V], dtype X
        Values and corrected values (V <= 256). HV is a multiple of H (GVA: value head hv reads
        query/key head hv // (HV // H)).
    g : array, shape [B, T, HV, K], float32
        Cumulative gate within each chunk, in log2 space (the operator uses exp2).
    beta : array, shape [B, T, HV], dtype X or float32
    A : array, shape [B, T, HV, BT], dtype X
        The per-chunk WY matrix, BT = chunk_size; used as stored (no mask is applied).
    h, dh : array, shape [B, NT, HV, K, V] ([B, NT, HV, V, K] when state_v_first), float32 or X
        Chunk states and their gradients, both of one dtype. NT = ceil(T / BT) per batch row,
        or with cu_seqlens the total number of chunks over all sequences (B = 1).
    do, dv : array, shape [B, T, HV, V], dtype X
        Gradient of the output and of v_new. dv is only read.
    scale : float, optional
        Query scale; None means K ** -0.5.
    cu_seqlens : array, shape [N + 1], int32 or int64, optional
        Sequence boundaries of N sequences packed along T (then B must be 1).
    chunk_size : int, default 64
        BT: 16, 32 or 64; must equal A.shape[-1].
    chunk_indices : array, shape [NT, 2], int32 or int64, optional
        (sequence id, chunk id within the sequence) for every chunk; derived from cu_seqlens
        when omitted (see ``kda_kernels.chunk_indices``).
    state_v_first : bool, default False
        h and dh are stored [.., V, K] instead of [.., K, V].
    backend : {None, 'cuda', 'cpu', 'cpu-ref'}, keyword-only
        None runs CUDA tensors on 'cuda' (on the tensors' device and torch's current stream)
        and CPU data on 'cpu' (float32, threaded). 'cpu-ref' is the float64 reference.

    All arrays are either torch tensors (CPU or CUDA; both run through the custom op
    ``torch.ops.kda_kernels.chunk_kda_bwd_wy_dqkg_fused``, which torch.compile traces and CUDA
    graphs capture) or NumPy arrays (CPU backends; bfloat16 as ml_dtypes' dtype). Inputs may
    have any non-negative element strides (broadcast dimensions included); outputs are new.

    Returns
    -------
    dq, dk : array, shape [B, T, HV, K], float32
        Per value head; for GVA the caller sums groups of HV // H heads.
    dv : array, shape [B, T, HV, V], dtype X
    db : array, shape [B, T, HV], float32
    dg : array, shape [B, T, HV, K], float32
        Before the caller's reverse cumulative sum.
    dA : array, shape [B, T, HV, BT], float32
        Strictly lower triangular within each chunk.

    Outputs are new contiguous arrays of the inputs' kind, on q's device.

    Raises
    ------
    TypeError
        An argument has the wrong dtype or is not an array of q's kind.
    ValueError
        An argument has the wrong rank, shape, size, device or contents (cu_seqlens,
        chunk_indices), or ``backend`` is unknown.
    NotImplementedError
        The backend does not support this case.
    RuntimeError
        libkda was not found, the backend is not available in it, or a CUDA error occurred.

    Examples
    --------
    >>> dq, dk, dv2, db, dg, dA = chunk_kda_bwd_wy_dqkg_fused(
    ...     q, k, v, v_new, g, beta, A, h, do, dh, dv, chunk_size=64)  # doctest: +SKIP
    """
    inputs = dict(q=q, k=k, v=v, v_new=v_new, g=g, beta=beta, A=A, h=h, do=do, dh=dh, dv=dv)
    if _is_torch_tensor(q):
        if not _TORCH_OP:
            raise RuntimeError(
                f"kda_kernels needs torch >= 2.4 (torch.library.custom_op); found {torch.__version__}"
            )
        return _torch_op.call(inputs, scale, cu_seqlens, chunk_size, chunk_indices,
                              state_v_first, backend)
    return _numpy_path.run(inputs, scale, cu_seqlens, chunk_size, chunk_indices, state_v_first,
                           backend)


def chunk_indices(cu_seqlens, chunk_size=64):
    """The chunk list the operator walks for packed sequences.

    Parameters
    ----------
    cu_seqlens : array, shape [N + 1], integer
        Non-decreasing sequence boundaries starting at 0 (NumPy array, sequence of ints, or torch
        tensor; a CUDA tensor is copied to the host, which synchronizes).
    chunk_size : int, default 64

    Returns
    -------
    array, shape [NT, 2]
        (sequence id, chunk id within the sequence) per chunk, in sequence order: an int64 NumPy
        array, or for a torch tensor a tensor of its dtype on its device.
    """
    if _is_torch_tensor(cu_seqlens) and _TORCH_OP:
        return _torch_op.chunk_indices(cu_seqlens, chunk_size)
    return _numpy_path.chunk_indices(cu_seqlens, chunk_size)


def backend_available(name):
    """Whether backend `name` ('cpu-ref', 'cpu' or 'cuda') is compiled into the loaded libkda and
    usable on this machine (for 'cuda': a CUDA device of compute capability 9.0, Hopper, which
    the library's sm_90a kernels need)."""
    if name not in _abi.BACKENDS:
        names = ", ".join(repr(n) for n in _abi.BACKENDS)
        raise ValueError(f"backend_available: expected one of {names}, got {name!r}")
    return bool(_library.library().dll.kda_backend_available(_abi.BACKENDS[name]))


def library_path():
    """Path of the libkda this package loaded (loading it if needed)."""
    return _library.library().path


def version():
    """libkda's version string, e.g. '0.1.0'."""
    return _library.library().dll.kda_version().decode()
