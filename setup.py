"""Build wiring for the one C extension, compiler.runtime._fastcall (the runtime's checked
fast call path; see compiler/runtime/_fastcall.c and its DLPack half, _dlpack.h).  Everything else is in pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("compiler.runtime._fastcall", ["compiler/runtime/_fastcall.c"],
                             depends=["compiler/runtime/_dlpack.h", "compiler/runtime/_results.h"],
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-missing-field-initializers"])])
