"""Build wiring for the one C extension, compiler.runtime._fastcall (the runtime's checked
fast call path; see compiler/runtime/_fastcall.c and the headers it includes: _entry.h,
_dlpack.h, _results.h).  Everything else is in pyproject.toml."""
from glob import glob

from setuptools import Extension, setup

setup(ext_modules=[Extension("compiler.runtime._fastcall", ["compiler/runtime/_fastcall.c"],
                             depends=sorted(glob("compiler/runtime/_*.h")),
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-missing-field-initializers"])])
