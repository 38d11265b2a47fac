#!/bin/bash
# Packs what tools/gpu_checks.sh needs on a lent GPU machine, which has the
# CUDA runtime, cuBLAS and NCCL but not forge's other libraries (Open MPI,
# HDF5, Boost, OpenBLAS, ...) and no network (docs/cuda.md, "On a lent GPU
# machine"). Run on the build machine after ./forge.sh build; writes into
# .gpu/ of the checkout (ignored by git):
#   .gpu/forge-gpu.tar.gz  bin/ (forge, forge_unit_tests, forge_mpi_tests,
#                          bench_cuda_kernels, bench_train_step,
#                          bench_tree_merge, bench_blas), lib/ (every library they load
#                          except glibc's and CUDA's), configs/
#   .gpu/openmpi.tar.gz    Debian's Open MPI runtime, relocatable with
#                          OPAL_PREFIX: bin/ (orterun, mpirun, orted), lib/
#                          (openmpi/ with its plugins, pmix2/, and the
#                          libraries the plugins load), share/, etc/
# Progress on stdout; exits 1 when a binary is missing (build first).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FORGE_BUILD_DIR:-$root/build}
out=$root/.gpu
sys=/usr/lib/x86_64-linux-gnu
# Libraries the GPU machine has (glibc's, the CUDA runtime and libraries).
skip='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.'

bins=("$build/forge" "$build/tests/forge_unit_tests" "$build/tests/forge_mpi_tests"
      "$build/bench/bench_cuda_kernels" "$build/bench/bench_train_step" "$build/bench/bench_tree_merge"
      "$build/bench/bench_blas")
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "gpu_bundle: $b is missing; run ./forge.sh build first" >&2; exit 1; }
done

# Copies (dereferenced) every library the given files load, except $skip, into $1.
copy_deps() {
  local dest=$1
  shift
  ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r name path; do
      [[ $name =~ $skip ]] || cp -L -n "$path" "$dest/$name"
    done
}

rm -rf "$out/pkg" "$out/ompi"
mkdir -p "$out/pkg/bin" "$out/pkg/lib"
cp "${bins[@]}" "$out/pkg/bin/"
cp -r "$root/configs" "$out/pkg/"
copy_deps "$out/pkg/lib" "${bins[@]}"
# BLIS is loaded with dlopen (src/backend/cpu/sgemm_library.hpp), so ldd does
# not list it; gpu_checks.sh puts pkg/lib on LD_LIBRARY_PATH, where forge finds
# it as libblis.so.4.
blis=$sys/blis-openmp/libblis.so.4
if [ -f "$blis" ]; then
  cp -L "$blis" "$out/pkg/lib/libblis.so.4"
  copy_deps "$out/pkg/lib" "$blis"
fi
tar czf "$out/forge-gpu.tar.gz" -C "$out/pkg" .
echo "gpu_bundle: $out/forge-gpu.tar.gz ($(du -h "$out/forge-gpu.tar.gz" | cut -f1), $(ls "$out/pkg/lib" | wc -l) libraries)"

o=$out/ompi
mkdir -p "$o/bin" "$o/lib" "$o/share" "$o/etc"
cp /usr/bin/orterun /usr/bin/orted "$o/bin/"
ln -s orterun "$o/bin/mpirun"
cp -r "$sys/openmpi" "$o/lib/"
cp -r "$sys/pmix2" "$o/lib/"
cp -r /usr/share/openmpi "$o/share/"
cp -r /etc/openmpi "$o/etc/"
mapfile -t plugins < <(find "$o/lib" -name '*.so*' -type f)
copy_deps "$o/lib" /usr/bin/orterun /usr/bin/orted "${plugins[@]}"
tar czf "$out/openmpi.tar.gz" -C "$o" .
echo "gpu_bundle: $out/openmpi.tar.gz ($(du -h "$out/openmpi.tar.gz" | cut -f1))"
rm -rf "$out/pkg" "$out/ompi"
echo "gpu_bundle: carry .gpu (and runs/demo/sft for the RL check) to the GPU machine; there run bash tools/gpu_checks.sh"
