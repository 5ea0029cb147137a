"""Build wiring for the one C extension, compiler._fastcall (the runtime's checked
fast call path; see compiler/_fastcall.c).  Everything else is in pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("compiler._fastcall", ["compiler/_fastcall.c"],
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-missing-field-initializers"])])
