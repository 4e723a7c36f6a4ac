"""The build's one part that pyproject.toml cannot state: the optional C decoder.

``aiokpl._core._cdecoder`` (``src/aiokpl/_core/_cdecoder.c``) decodes KPL aggregates in time
linear in their size whatever they hold (``docs/aggregation.md``). It is optional: where it cannot
be compiled (no C compiler or no Python headers), the build warns and goes on, and the package
uses its pure-Python decoder, which returns the same results more slowly. Set
``AIOKPL_NO_EXTENSIONS=1`` to build without it (and, at run time, to use the pure-Python decoder
even where it was built).
"""

import os

from setuptools import Extension, setup

extensions = []
if not os.environ.get("AIOKPL_NO_EXTENSIONS"):
    extensions.append(
        Extension(
            "aiokpl._core._cdecoder",
            sources=["src/aiokpl/_core/_cdecoder.c"],
            optional=True,
        )
    )

setup(ext_modules=extensions)
