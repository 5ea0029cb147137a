"""Build wiring for the one C extension, compiler.runtime._fastcall (the runtime's checked
fast call path; see compiler/runtime/_fastcall.c).  Everything else is in pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("compiler.runtime._fastcall", ["compiler/runtime/_fastcall.c"],
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-missing-field-initializers"])])
