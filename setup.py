"""Builds fxcut's C extension, fxcut._C, from csrc/.

FXCUT_WERROR=1 turns every compiler warning into an error (CI sets it).
FXCUT_SANITIZE=1 builds with AddressSanitizer and UndefinedBehaviorSanitizer.
"""
import glob
import os

from setuptools import Extension, setup

compile_args = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Wshadow", "-Wconversion",
                "-Wno-sign-conversion", "-fvisibility=hidden"]
# -pthread: the plan's search simulates decisions on several threads (csrc/plan.c, "lanes")
compile_args.append("-pthread")
link_args: list[str] = ["-pthread"]
if os.environ.get("FXCUT_WERROR") == "1":
    compile_args.append("-Werror")
if os.environ.get("FXCUT_SANITIZE") == "1":
    san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
    compile_args = [a for a in compile_args if a != "-O2"] + ["-O1", "-g"] + san
    link_args += san

setup(
    ext_modules=[
        Extension(
            "fxcut._C",
            sources=sorted(glob.glob("csrc/*.c")),
            depends=sorted(glob.glob("csrc/*.h")),
            include_dirs=["csrc"],
            extra_compile_args=compile_args,
            extra_link_args=link_args,
        )
    ],
)
