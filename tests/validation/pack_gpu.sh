#!/bin/sh
# pack_gpu.sh — this build, self-contained, for a GPU machine where nothing can be installed:
# dlsim, dlsim-real, dlsim-sgplat, the CUDA module and test_kernels_cuda, every library they need
# (GLib, OpenBLAS, SimGrid, ...) except the C library's and CUDA's, and the runtime of Open MPI
# and PMIx (mpirun, their plugins and help texts), packed as one archive.
#
#   tests/validation/pack_gpu.sh [ARCHIVE]      (default dlsim-gpu.tar.xz; run from the checkout)
#
# On the GPU machine, in a checkout of the same commit (the workloads and scripts come from it):
#   tar xJf dlsim-gpu.tar.xz && . .dev/env.sh
#   DLSIM=.dev/bin/dlsim TESTBIN=.dev/bin/test_kernels_cuda tests/validation/run_gpu.sh OUT
# The machine must run the same C library or a newer one, and have CUDA's runtime and cuBLAS
# (env.sh adds /usr/local/cuda/lib64 to the library path).
set -eu
ARCHIVE=${1:-dlsim-gpu.tar.xz}
B=${BUILD:-build}
A=/usr/lib/x86_64-linux-gnu
for f in dlsim dlsim-real dlsim-sgplat libdlsim-cuda.so test_kernels_cuda; do
  [ -e "$B/$f" ] || { echo "pack_gpu.sh: $B/$f: not built (a build with CUDA and MPI)" >&2; exit 2; }
done
command -v mpirun >/dev/null || { echo "pack_gpu.sh: no mpirun on the PATH (Open MPI)" >&2; exit 2; }
MPIRUN=$(readlink -f "$(command -v mpirun)")
[ -d "$A/openmpi/lib/openmpi3" ] || { echo "pack_gpu.sh: Open MPI's plugins are not in $A/openmpi" >&2; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
D=$T/.dev
mkdir -p "$D/bin" "$D/lib" "$D/ompi/bin" "$D/ompi/lib/x86_64-linux-gnu/openmpi/lib" "$D/ompi/share"
for f in dlsim dlsim-real dlsim-sgplat libdlsim-cuda.so test_kernels_cuda; do cp "$B/$f" "$D/bin/"; done
strip "$D/bin/dlsim" "$D/bin/dlsim-real" "$D/bin/dlsim-sgplat" "$D/bin/test_kernels_cuda"
# Open MPI (relocated by OPAL_PREFIX) and PMIx (by PMIX_INSTALL_PREFIX)
cp "$MPIRUN" "$D/ompi/bin/mpirun"
cp -r "$A/openmpi/lib/openmpi3" "$D/ompi/lib/x86_64-linux-gnu/openmpi/lib/"
cp -r /usr/share/openmpi "$D/ompi/share/"
if [ -d "$A/pmix2" ]; then cp -r "$A/pmix2" "$D/pmix2"; rm -rf "$D/pmix2/include"; fi
# every library all of these load, but the C library's and CUDA's (the GPU machine has its own);
# Open MPI's plugins for hardware this machine lacks (UCX, libfabric, ...) may miss theirs: Open
# MPI skips such a plugin, so only the programs' own libraries must all be found
CUDA_LIBS='/(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libcuda|libcudart|libcublas|libcublasLt)\.so'
MISSING=$(ldd "$D"/bin/dlsim "$D"/bin/dlsim-real "$D"/bin/dlsim-sgplat "$D"/ompi/bin/mpirun |
  awk '/not found/ {print $1}' | grep -v -E 'libcuda|libcudart|libcublas' | sort -u | tr '\n' ' ')
[ -z "$MISSING" ] || { echo "pack_gpu.sh: libraries not found here: $MISSING" >&2; exit 2; }
ldd "$D"/bin/* "$D"/ompi/bin/mpirun "$D"/ompi/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so \
    $( [ -d "$D/pmix2" ] && ls "$D"/pmix2/lib/pmix/*.so ) 2>/dev/null |
  awk '/=>/ && $3 ~ /^\// {print $3}' | sort -u | grep -v -E "$CUDA_LIBS" |
  while read -r l; do cp -L "$l" "$D/lib/"; done
cat >"$D/env.sh" <<'ENV'
# . .dev/env.sh — the packed dlsim, from the checkout's top directory
P=$(pwd)/.dev
export OPAL_PREFIX=$P/ompi PMIX_INSTALL_PREFIX=$P/pmix2 DLSIM_MPIRUN=$P/ompi/bin/mpirun
export OMPI_MCA_mca_base_component_show_load_errors=0
export DLSIM_REAL_EXEC=$P/bin/dlsim-real DLSIM_SGPLAT=$P/bin/dlsim-sgplat DLSIM_DATA_DIR=$(pwd)
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ENV
(cd "$T" && tar cJf archive.tar.xz .dev)
mv "$T/archive.tar.xz" "$ARCHIVE"
echo "pack_gpu.sh: $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1)): tar xJf it in a checkout, then . .dev/env.sh"
