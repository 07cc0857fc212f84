# kdp's Spack package: data-parallel neural-network training on Kokkos.
#
# kdp is built from a checkout (it has no public release to download): in a
# Spack environment,
#
#   spack repo add <checkout>/spack
#   spack add kdp@main +openmp
#   spack develop --path <checkout> kdp@main
#   spack install
#
# or from a git repository the user names (a clone on a shared file system, a
# local mirror): KDP_GIT_URL=file:///path/to/kdp.git spack install kdp@main
# (spack/README.md).

import os

from spack.package import *


class Kdp(CMakePackage, CudaPackage, ROCmPackage):
    """kdp: PyTorch-style data-parallel training (DataParallel,
    DistributedDataParallel, HDF5 data and checkpoints) in C++ on Kokkos."""

    # No address is named that does not exist: the sources come from the
    # user's checkout (spack develop) or from the repository they name.
    git = os.environ.get("KDP_GIT_URL")

    version("main", branch="main")

    variant("mpi", default=True, description="Distributed training over MPI")
    variant("hdf5", default=True, description="HDF5 datasets and checkpoints")
    variant("openmp", default=False, description="Kokkos' OpenMP backend")
    variant("examples", default=True, description="The example programs")
    variant("tools", default=True, description="The kdp-train and kdp-data tools (need +hdf5)")
    variant(
        "x86_kernels",
        default=True,
        description="kdp's own x86-64 kernels, chosen at run time (off: the portable code)",
    )
    variant(
        "onednn",
        default=False,
        description="Convolutions and bf16 products through oneDNN 2.x on CPUs (AMX, AVX-512)",
    )
    variant("tests", default=False, description="Build the GoogleTest suites")
    variant("perf", default=False, description="Build the benchmarks of perf/")
    variant("sanitizers", default=False, description="Build with AddressSanitizer and UBSan")
    variant(
        "gpu_aware_mpi",
        default=False,
        description="Hand GPU memory straight to a CUDA/ROCm-aware MPI instead of staging it",
    )
    variant("fuzzing", default=False, description="Build the libFuzzer targets (needs clang)")

    depends_on("cmake@3.21:", type="build")
    depends_on("kokkos@4.0:")
    depends_on("kokkos-kernels@4.0:")
    depends_on("kokkos+openmp", when="+openmp")
    depends_on("kokkos-kernels+openmp", when="+openmp")
    depends_on("kokkos-kernels+blas")
    # kdp's GEMMs are float on row-major (LayoutRight) views: have those
    # instantiated in the library (Spack's default is double and LayoutLeft).
    depends_on("kokkos-kernels scalars=float layouts=right")
    depends_on("blas")
    depends_on("fmt")
    depends_on("mpi", when="+mpi")
    depends_on("hdf5~mpi", when="+hdf5~mpi")
    depends_on("hdf5+mpi", when="+hdf5+mpi")
    depends_on("zlib-api", when="+hdf5")
    depends_on("cli11", when="+tools")
    depends_on("nlohmann-json", when="+hdf5")
    # kdp calls oneDNN's 2.x API (Debian 12 packages 2.6).
    depends_on("onednn@2.6:2", when="+onednn")
    depends_on("googletest", type="test", when="+tests")
    depends_on("benchmark", type=("build", "test"), when="+perf")

    # The GPU backends are Kokkos' own: forward the architecture to it.
    for _arch in CudaPackage.cuda_arch_values:
        _dep = "+cuda cuda_arch={0}".format(_arch)
        depends_on("kokkos {0} +cuda_lambda +wrapper".format(_dep), when=_dep)
        depends_on("kokkos-kernels {0} +cublas".format(_dep), when=_dep)
    for _target in ROCmPackage.amdgpu_targets:
        _dep = "+rocm amdgpu_target={0}".format(_target)
        depends_on("kokkos {0}".format(_dep), when=_dep)
        depends_on("kokkos-kernels {0}".format(_dep), when=_dep)

    conflicts("+onednn", when="+cuda", msg="oneDNN serves host backends; CUDA builds use cuBLAS")
    conflicts("+onednn", when="+rocm", msg="oneDNN serves host backends")
    conflicts("+cuda", when="+rocm", msg="kdp builds for one GPU backend at a time")
    conflicts("+tests", when="~hdf5", msg="the test suites need HDF5")
    conflicts("+tools", when="~hdf5", msg="kdp-train and kdp-data read and write HDF5")
    conflicts("+fuzzing", when="%gcc", msg="libFuzzer needs clang")
    conflicts("+gpu_aware_mpi", when="~mpi", msg="GPU-aware MPI needs +mpi")

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define_from_variant("KDP_ENABLE_MPI", "mpi"),
            self.define_from_variant("KDP_ENABLE_HDF5", "hdf5"),
            self.define_from_variant("KDP_ENABLE_EXAMPLES", "examples"),
            self.define_from_variant("KDP_ENABLE_TOOLS", "tools"),
            self.define_from_variant("KDP_ENABLE_X86_KERNELS", "x86_kernels"),
            self.define_from_variant("KDP_ENABLE_ONEDNN", "onednn"),
            self.define_from_variant("KDP_ENABLE_TESTS", "tests"),
            self.define_from_variant("KDP_ENABLE_PERF", "perf"),
            self.define_from_variant("KDP_ENABLE_SANITIZERS", "sanitizers"),
            self.define_from_variant("KDP_ENABLE_FUZZING", "fuzzing"),
            self.define_from_variant("KDP_ENABLE_GPU_AWARE_MPI", "gpu_aware_mpi"),
            self.define("Kokkos_ROOT", spec["kokkos"].prefix),
            self.define("KokkosKernels_ROOT", spec["kokkos-kernels"].prefix),
        ]
        if spec.satisfies("+cuda"):
            # CUDA builds compile through Kokkos' nvcc_wrapper.
            args.append(self.define("CMAKE_CXX_COMPILER", spec["kokkos"].kokkos_cxx))
        if spec.satisfies("+rocm"):
            args.append(self.define("CMAKE_CXX_COMPILER", spec["hip"].hipcc))
        return args

    def check(self):
        with working_dir(self.build_directory):
            ctest("--output-on-failure", "-LE", "slurm|perf-smoke")
