#!/usr/bin/python3
"""spack/packages/kdp/package.py is valid Python, every KDP_ENABLE_* option of
CMakeLists.txt has its variant, mapped with define_from_variant, it names no
web address, and it asks Kokkos Kernels for kdp's instantiations.

    spack_package_check.py REPO_ROOT
"""
import ast
import os
import re
import sys


def main():
    root = sys.argv[1]
    package = os.path.join(root, "spack", "packages", "kdp", "package.py")
    with open(package) as f:
        source = f.read()
    ast.parse(source, package)  # a SyntaxError fails the test with its line
    with open(os.path.join(root, "CMakeLists.txt")) as f:
        options = re.findall(r"option\(KDP_ENABLE_(\w+)", f.read())
    # The AUTO/ON/OFF choices of cmake/ (Spack passes ON or OFF).
    with open(os.path.join(root, "cmake", "kdpDependencies.cmake")) as f:
        options += re.findall(r"set\(KDP_ENABLE_(\w+) AUTO CACHE STRING", f.read())
    if not options:
        sys.exit("no KDP_ENABLE_* options found in CMakeLists.txt")
    variants = set(re.findall(r'variant\(\s*"(\w+)"', source))
    missing = []
    for option in options:
        name = option.lower()
        if name not in variants:
            missing.append(f"KDP_ENABLE_{option} has no variant '{name}'")
        if f'define_from_variant("KDP_ENABLE_{option}", "{name}")' not in source:
            missing.append(f"KDP_ENABLE_{option} is not set from variant '{name}' in cmake_args")
    # No web address at all: kdp has none, and Spack must not be sent to one.
    for url in re.findall(r"https?://[^\s\"')]+", source):
        missing.append(f"the package names the address {url}")
    if 'scalars=float' not in source or 'layouts=right' not in source:
        missing.append("Kokkos Kernels is not asked for the float, LayoutRight instantiations")
    for base in ("CudaPackage", "ROCmPackage"):
        if not re.search(rf"class Kdp\([^)]*\b{base}\b", source):
            missing.append(f"the package class does not derive from {base}")
    if missing:
        sys.exit("\n".join(missing))
    print(f"ok: {len(options)} options, each with its variant: {', '.join(o.lower() for o in options)}")


if __name__ == "__main__":
    main()
