"""The cffi builder of ``hybridsql._kernels``: the kernels of hybridsql.c, without the SQL layer."""

import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]
EXTRA = SANITIZE if os.environ.get("HYBRIDSQL_SANITIZE") else []

with open(os.path.join(HERE, "hybridsql.h")) as f:
    CDEF = "".join(line for line in f if not line.startswith("#"))

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "hybridsql._kernels",
    '#include "hybridsql.h"',
    sources=[os.path.relpath(os.path.join(HERE, "hybridsql.c"))],
    include_dirs=[os.path.relpath(HERE)],
    define_macros=[("HYBRIDSQL_KERNELS_ONLY", "1")],
    extra_compile_args=["-O3", "-fno-math-errno", "-fvisibility=hidden"] + EXTRA,
    extra_link_args=EXTRA,
    libraries=["m"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
