"""Which backend machinery the installed fla provides, found by what it has, not by its version
string, behind one small interface that kda_kernels.fla uses.

Two shapes are supported:

- fla 0.6.x: ``fla.backends`` (``BaseBackend``, ``BackendRegistry``, ``register``, ``dispatch``);
  the KDA registry is the operation registry named ``"kda"``, whose dispatch walks its backends
  by priority on every call; ``chunk_kda`` itself is dispatched through a registry of its own
  (``fla.backends._function_registries``, keyed by the undecorated function).
- fla 0.5.2: ``fla.ops.backends`` (``BaseBackend``, ``BackendRegistry``) and
  ``fla.ops.kda.backends.kda_registry``, which caches an active backend that must be recomputed
  when one is removed.

Anything else is refused with an error that says what was found and which releases work.
"""

import importlib
import importlib.util

SUPPORTED = "fla 0.5.2 and 0.6.x"


class FlaUnsupportedError(ImportError):
    """fla is installed, but its backend machinery has a shape kda_kernels does not know."""


class FlaRelease:
    """The pieces of one installed fla that kda_kernels.fla uses.

    Attributes: ``shape`` ("fla.backends" or "fla.ops.backends"), ``version`` (fla's own string,
    for messages only), ``base_class`` (fla's BaseBackend), ``registry`` (the KDA registry),
    ``dispatch_disabled`` (FLA_DISABLE_BACKEND_DISPATCH was set when fla was imported).
    """

    def __init__(self, shape, version, base_class, registry, dispatch_disabled,
                 chunk_kda_registry=None, common_registry=None):
        self.shape = shape
        self.version = version
        self.base_class = base_class
        self.registry = registry
        self.dispatch_disabled = dispatch_disabled
        # 0.6.x dispatches chunk_kda through a registry of its own (0.5.2: the KDA registry).
        self.chunk_kda_registry = chunk_kda_registry
        # The "common" registry of the state scans (None where this fla has none).
        self.common_registry = common_registry

    def _registries(self):
        return [r for r in (self.registry, self.chunk_kda_registry, self.common_registry)
                if r is not None]

    def register(self, backend):
        """Register (or replace, by backend_type) a backend instance, for chunk_kda and the
        common state scans as well."""
        for registry in self._registries():
            registry.register(backend)

    def unregister(self, backend_type):
        """Remove the backend of that type; harmless when it is not registered."""
        for registry in self._registries():
            if self.shape == "fla.ops.backends":
                # 0.5.2 caches the active backend: recompute it without ours.
                with registry._lock:
                    registry._backends.pop(backend_type, None)
                    registry._active = None
                    registry._update_active_backend()
            else:
                registry._backends.pop(backend_type, None)

    def registered(self, backend_type):
        """The registered backend instance of that type, or None."""
        return self.registry._backends.get(backend_type)


def _missing(module, names):
    return [name for name in names if not hasattr(module, name)]


def _fla_version(fla):
    return getattr(fla, "__version__", "of unknown version")


def _import_optional(name):
    """The module, or None when it does not exist in the installed fla (any other import error
    propagates: a broken fla is not a missing piece)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is not None and (name == e.name or name.startswith(e.name + ".")):
            return None
        raise


def _function_registry(backends):
    """0.6.x: the registry fla's ``@dispatch`` made for chunk_kda itself (keyed by the function
    under its decorators, as fla's own ``register(chunk_kda)`` finds it), or None. With
    FLA_DISABLE_BACKEND_DISPATCH=1 fla makes none, and nothing is dispatched: an empty
    stand-in keeps register() harmless, and enable() refuses the disabled dispatch anyway."""
    import inspect

    chunk = importlib.import_module("fla.ops.kda.chunk")
    registries = getattr(backends, "_function_registries", None)
    if registries is None:
        return None
    found = registries.get(inspect.unwrap(chunk.chunk_kda))
    if found is None and getattr(backends, "_DISPATCH_DISABLED", False):
        return backends.BackendRegistry("fla.ops.kda.chunk")
    if found is None or not hasattr(found, "_backends") or not hasattr(found, "register"):
        return None
    return found


def _common_registry_06(backends):
    """0.6.x: the "common" operation registry (the state scans' dispatch), with fla's own common
    backends loaded into it as fla's first dispatch would; None where this fla has none."""
    if _import_optional("fla.ops.common.backends") is None:
        return None
    registry = backends._get_operation_registry("common")
    return registry if hasattr(registry, "_backends") and hasattr(registry, "register") else None


def load():
    """The installed fla as a FlaRelease.

    Raises ImportError when fla is not installed, FlaUnsupportedError (an ImportError) when it
    is but provides neither supported shape."""
    if importlib.util.find_spec("fla") is None:
        raise ImportError(
            "kda_kernels.fla needs flash-linear-attention (fla), which is not installed "
            f"(kda_kernels supports {SUPPORTED}: pip install flash-linear-attention)")
    import fla

    where = f"fla {_fla_version(fla)} at {getattr(fla, '__file__', '?')}"

    backends = _import_optional("fla.backends")
    if backends is not None:
        lacking = _missing(backends, ("BaseBackend", "BackendRegistry", "dispatch",
                                      "_get_operation_registry"))
        if not lacking:
            # Importing fla's KDA operators creates the "kda" registry and loads fla's own
            # KDA backends into it.
            importlib.import_module("fla.ops.kda")
            registry = backends._get_operation_registry("kda")
            chunk_kda_registry = _function_registry(backends)
            if chunk_kda_registry is None:
                lacking = ["a registry of fla.ops.kda.chunk.chunk_kda (fla.backends."
                           "_function_registries)"]
            elif hasattr(registry, "_backends") and hasattr(registry, "register"):
                return FlaRelease("fla.backends", _fla_version(fla), backends.BaseBackend,
                                  registry, bool(getattr(backends, "_DISPATCH_DISABLED", False)),
                                  chunk_kda_registry, _common_registry_06(backends))
            else:
                lacking = ["the 'kda' registry's _backends / register"]
        raise FlaUnsupportedError(
            f"kda_kernels.fla: {where} has fla.backends but not what kda_kernels registers "
            f"through (missing: {', '.join(lacking)}); kda_kernels supports {SUPPORTED}")

    old = _import_optional("fla.ops.backends")
    if old is not None:
        kda_backends = _import_optional("fla.ops.kda.backends")
        registry = getattr(kda_backends, "kda_registry", None)
        lacking = _missing(old, ("BaseBackend",))
        if registry is None:
            lacking.append("fla.ops.kda.backends.kda_registry")
        if not lacking:
            common = _import_optional("fla.ops.common.backends")
            common_registry = getattr(common, "common_registry", None)
            if not hasattr(common_registry, "_backends"):
                common_registry = None
            return FlaRelease("fla.ops.backends", _fla_version(fla), old.BaseBackend, registry,
                              bool(getattr(old, "_DISPATCH_DISABLED", False)),
                              common_registry=common_registry)
        raise FlaUnsupportedError(
            f"kda_kernels.fla: {where} has fla.ops.backends but not what kda_kernels registers "
            f"through (missing: {', '.join(lacking)}); kda_kernels supports {SUPPORTED}")

    raise FlaUnsupportedError(
        f"kda_kernels.fla: {where} has no backend registry (neither fla.backends, as in 0.6.x, "
        f"nor fla.ops.backends, as in 0.5.2); kda_kernels supports {SUPPORTED}")
