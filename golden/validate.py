"""Input checks shared by the golden model's public functions, and by the command lines."""

import argparse

import numpy as np

__all__ = ["check_int", "int_argument", "check_array", "check_grad", "check_generator"]


def check_int(name, value, *, low=None, high=None):
    """Validate an integer parameter and its range, and return it as ``int``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    value = int(value)
    if low is not None and value < low or high is not None and value > high:
        rule = (f"between {low} and {high}" if low is not None and high is not None
                else f"at least {low}" if low is not None else f"at most {high}")
        raise ValueError(f"{name} must be {rule}, not {value!r}")
    return value


def int_argument(name, *, low=None, high=None):
    """An ``argparse`` ``type`` for an integer option, checked as :func:`check_int` checks it:
    a value it refuses is the parser's error, named with its rule, before anything runs."""
    def parse(text):
        try:
            return check_int(name, int(text), low=low, high=high)
        except ValueError as error:
            message = str(error) if str(error).startswith(name) else \
                f"{name} must be an integer, not {text!r}"
            raise argparse.ArgumentTypeError(message) from None
    return parse


def check_array(value, *, name, dtype, ndim):
    """Validate an array produced by another golden function (counts, sums, lines)."""
    if not isinstance(value, np.ndarray) or value.dtype != dtype or value.ndim != ndim:
        got = (f"a {value.ndim}-D {value.dtype} array" if isinstance(value, np.ndarray)
               else type(value).__name__)
        raise TypeError(f"{name} must be a {ndim}-D numpy.ndarray of {np.dtype(dtype)}, not {got}")
    return value


def check_grad(grad, *, name="grad", nan_check=True):
    """Validate a gradient: a floating-point array with no NaN. Returns it flattened.

    NaN is refused because a NaN gradient is a training fault, not a value with a sign:
    the runtime's health monitor turns it into an FP32 fallback instead. +-Inf is allowed.
    A caller that reads the data for its own min/max anyway passes ``nan_check=False`` and
    calls again with the check when those came out NaN.
    """
    grad = np.asarray(grad)
    if not np.issubdtype(grad.dtype, np.floating):
        raise TypeError(f"{name} must be a floating-point array, not dtype {grad.dtype}")
    flat = np.ravel(grad)
    # min() propagates NaN and reads the data once without a temporary.
    if nan_check and flat.size and np.isnan(flat.min()):
        where = int(np.flatnonzero(np.isnan(flat))[0])
        raise ValueError(
            f"{name} must not contain NaN (first at flat index {where}); "
            "a NaN gradient is a fault for the health monitor, not a value to encode")
    return flat


def check_generator(rng, *, name="rng"):
    """Validate a ``numpy.random.Generator`` (the golden model never uses global RNG state)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"{name} must be a numpy.random.Generator (for example numpy.random.default_rng(seed)), "
            f"not {type(rng).__name__}")
    return rng
