"""The exceptions a call raises at the caller (compiler/runtime/library.py re-exports them;
compiler/runtime/binding.py raises them too; KinaRuntimeError lives in loader.py)."""


class KinaArgumentError(TypeError):
    """An argument (or out= buffer) of the wrong dtype, shape or count, aliased outputs,
    or sizes of a dynamic function that its arguments do not agree on."""


class KinaIndexError(KinaArgumentError, IndexError):
    """An I64 argument holding an index outside the range its uses allow (gather, take_along_axis)."""
