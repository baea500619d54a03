"""Compiled helpers shared by the library's kernels: LLVM intrinsics and an exact integer
conversion that vectorizes.

Imported only by compiled modules (numba), which are themselves imported only through
:mod:`forgetting.content.kernels`: ``import forgetting`` never loads numba.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

INT64_LIMIT = 9223372036854775808.0
"""2^63: rint results in [-2^63, 2^63) cast to int64 exactly."""


@intrinsic
def prefetch(typingctx, array, index):
    """Ask the CPU to start loading the cache line of ``array[index]`` (1-D, C order) now.

    A hint only (LLVM's ``llvm.prefetch``, compiled to one prefetch instruction or to nothing
    on a target without one): it reads no value and writes none, so no result can depend on
    it. Why: a one-row update touches ~64 cells scattered over ~40 MB of sums and a few
    hundred probe rows, none of them in cache after the prediction that ran in between; the
    loads that discover them depend on each other (the probe index, then the probe), so
    without the hint each waits a full memory latency in turn."""
    signature = types.void(array, index)

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        byte_ptr = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        # read (0), keep in all cache levels (3), data cache (1)
        builder.call(fn, [builder.bitcast(ptr, byte_ptr), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def float_bits(typingctx, x):
    """The IEEE-754 bits of float64 ``x`` as an int64 (LLVM's ``bitcast``: no instruction
    of its own, and vectorizable, unlike a view through memory)."""
    if x != types.float64:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


SMALL_LIMIT = 2.0**51
"""Integer-valued floats below this in magnitude convert by :func:`small_int`."""
_SHIFT = 1.5 * 2.0**52
_SHIFT_BITS = int(np.array(_SHIFT).view(np.int64))


@numba.njit(cache=True, nogil=True, inline="always")
def small_int(x):
    """int64(x) for an integer-valued float64 with |x| < 2^51 (the caller checks).

    Why not ``np.int64(x)``: x86-64 before AVX-512 has no vector float64 → int64
    conversion, so a loop that converts is compiled to one scalar conversion per value —
    the rounded terms below are the bulk of the tables' arithmetic. Here: x + 1.5·2^52 is
    exact (the sum lies in [2^52, 2^53), where floats are the integers) and the bits of
    floats of one binade differ by the difference of their values, so the bits less those
    of 1.5·2^52 are x — an add and a subtract, both vectorizable. −0.0 gives 0, as the cast."""
    return float_bits(x + _SHIFT) - _SHIFT_BITS
