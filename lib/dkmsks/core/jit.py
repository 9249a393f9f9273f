"""What the compiled paths are made with: numba's decorator (a no-op without numba), the
cache-line prefetch they use to overlap memory waits, and the choice of kernel (``numba`` or
``numpy``).

Kept apart from :mod:`dkmsks.core.kernel`, which imports :mod:`dkmsks.core.knn_state` (for the
exact test it compiles), so that modules it imports can compile functions of their own without
an import cycle."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["HAVE_NUMBA", "KERNELS", "kernel_name", "read_only"]

#: The kernel names :func:`kernel_name` accepts.
KERNELS = ("numba", "numpy")

try:  # numba is pinned in requirements.lock; the numpy path remains the reference without it
    # Its cache directory is named by the core's sources (dkmsks.numba_cache, set on importing
    # the package, before this module: the core reads no files).
    import numba

    _jit: Any = numba.njit(cache=True, nogil=True)
    # Inlined into its callers by numba itself (not left to LLVM): a helper that takes an array
    # and is called once per key or entry of a loop otherwise pays numba's reference counting
    # of that array at every call (docs/benchmarks.md, "The lookup kernel in numba and in Rust").
    _inline: Any = numba.njit(inline="always", cache=True, nogil=True)
    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only on a machine without numba
    HAVE_NUMBA = False

    def _jit(fn: Any) -> Any:
        return fn

    _inline = _jit


_prefetch: Any
if HAVE_NUMBA:
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    def _prefetch_typed(typingctx: Any, array: Any, index: Any) -> Any:  # noqa: ARG001 - numba's signature
        """Ask for the cache line of ``array[index]`` (LLVM's prefetch: read, keep in every level).

        Nothing is loaded into a register and no fault is raised, so the index need not be in
        bounds; the kernel's loop then finds the line in cache instead of waiting for memory.
        On a machine where 20 workers' indexes do not fit in cache, that wait is most of a
        lookup (docs/benchmarks.md, "The lookup kernel's memory waits")."""
        if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
            return None
        sig = types.void(array, index)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            array_type, index_type = signature.args
            view = context.make_array(array_type)(context, builder, args[0])
            at = context.cast(builder, args[1], index_type, types.intp)
            byte = ir.IntType(8).as_pointer()
            # No bounds check: an address past the end is only a hint (see above).
            address = builder.bitcast(cgutils.get_item_pointer(context, builder, array_type, view, [at]), byte)
            i32 = ir.IntType(32)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32]),
                                                "llvm.prefetch.p0")
            builder.call(fn, [address, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return sig, codegen

    _prefetch = intrinsic(_prefetch_typed)
else:  # pragma: no cover - the numpy path never calls the kernels

    def _no_prefetch(array: Any, index: Any) -> None:  # noqa: ARG001
        return None

    _prefetch = _no_prefetch


def kernel_name(requested: str | None = None) -> str:
    """The kernel to use: ``requested``, else ``numba`` when it imports, else ``numpy``."""
    name = (requested or ("numba" if HAVE_NUMBA else "numpy")).lower()
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r}; valid kernels: {', '.join(KERNELS)}")
    if name == "numba" and not HAVE_NUMBA:
        raise ValueError("kernel 'numba' asked for, but numba cannot be imported; use kernel='numpy'")
    return name


def read_only(values: np.ndarray) -> np.ndarray:
    """A read-only view of ``values`` (no copy), for an array a compiled function only reads.

    numba compiles a read-only array as a type of its own: a wrapper that passes every caller's
    array this way compiles once, whether the caller's is writable or not (the main server's
    plan columns are read-only, most others are not), and ``warm_up`` compiles that one."""
    view = values.view()
    view.flags.writeable = False
    return view
