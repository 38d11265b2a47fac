#!/bin/bash
# Packs what tools/gpu_checks.sh needs on a lent GPU machine, which has the
# CUDA runtime, cuBLAS and NCCL but not forge's other libraries (Open MPI,
# HDF5, Boost, OpenBLAS, ...) and no network (docs/cuda.md, "On a lent GPU
# machine"). Run on the build machine after ./forge.sh build; writes into
# .gpu/ of the checkout (ignored by git):
#   .gpu/forge-gpu.tar.xz  bin/ (forge, forge_unit_tests, forge_mpi_tests,
#                          bench_cuda_kernels, bench_train_step,
#                          bench_tree_merge, bench_blas), lib/ (every library they load
#                          except glibc's and CUDA's), configs/
#   .gpu/openmpi.tar.xz    Debian's Open MPI runtime, relocatable with
#                          OPAL_PREFIX: bin/ (orterun, mpirun, orted), lib/
#                          (openmpi/ with its plugins, pmix2/, and the
#                          libraries the plugins load), share/, etc/; not
#                          with --no-mpi (only the rl and publish stages
#                          need it)
#   .gpu/baseline.tar.xz   with --baseline REV only: bench_cuda_kernels and
#                          bench_train_step built at commit REV (a Release
#                          build in a temporary git worktree, a few minutes),
#                          and REVISION; gpu_checks.sh then runs them beside
#                          the current build's, on the same GPU (A/B)
#   .gpu/native.tar.xz     with --native-for ARCH only: bench_train_step and
#                          bench_tree_merge of this checkout built for one
#                          CPU (FORGE_NATIVE=ON with FORGE_NATIVE_ARCH=ARCH,
#                          e.g. sapphirerapids for the lent machines'
#                          Emerald Rapids hosts: what -march=native builds
#                          there), and ARCH;
#                          gpu_checks.sh's native stage runs them beside the
#                          portable ones (the CPU issue's portable/native
#                          ratio on the host's CPU)
# Each is a tar compressed by xz -9, whose 64 MiB window finds the CUDA
# kernels every binary links (about 12 MB each) once for all of them:
# forge-gpu is about 21 MB (gzip, 32 KB window: 58 MB), so .gpu stays well
# within what a device call carries (64 MiB); the total is printed at the
# end. A baseline or native bundle of an earlier version of this script
# (.tar.gz) is converted.
# Progress on stdout; exits 1 when a binary is missing (build first) or was
# built without CUDA, or a library it loads cannot be found, 2 on a bad
# argument.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FORGE_BUILD_DIR:-$root/build}
out=$root/.gpu
baseline=""
native=""
mpi=1
usage="usage: tools/gpu_bundle.sh [--baseline REV] [--native-for ARCH] [--no-mpi]"
while [ $# -gt 0 ]; do
  case $1 in
    --baseline) [ $# -ge 2 ] || { echo "gpu_bundle: --baseline needs a commit" >&2; exit 2; }; baseline=$2; shift 2 ;;
    --baseline=*) baseline=${1#*=}; [ -n "$baseline" ] || { echo "gpu_bundle: --baseline needs a commit" >&2; exit 2; }; shift ;;
    --native-for) [ $# -ge 2 ] || { echo "gpu_bundle: --native-for needs a GCC -march name" >&2; exit 2; }; native=$2; shift 2 ;;
    --native-for=*) native=${1#*=}; [ -n "$native" ] || { echo "gpu_bundle: --native-for needs a GCC -march name" >&2; exit 2; }; shift ;;
    --no-mpi) mpi=0; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_bundle: unknown argument '$1' ($usage)" >&2; exit 2 ;;
  esac
done
if [ -n "$native" ] && ! echo 'int main() {}' | g++ -march="$native" -x c++ -o /dev/null - 2>/dev/null; then
  echo "gpu_bundle: --native-for $native: not a -march this GCC knows" >&2
  exit 2
fi
if [ -n "$baseline" ]; then
  rev=$(git -C "$root" rev-parse --verify --quiet "$baseline^{commit}") ||
    { echo "gpu_bundle: --baseline $baseline is not a commit of this repository" >&2; exit 2; }
fi
sys=/usr/lib/x86_64-linux-gnu
# Libraries the GPU machine has (glibc's, the CUDA runtime and libraries).
# glibc's own must come from the machine's glibc: libresolv and the others
# import its GLIBC_PRIVATE symbols.
skip='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libanl|libutil|libmvec|libnss_[a-z]*|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.'

bins=("$build/forge" "$build/tests/forge_unit_tests" "$build/tests/forge_mpi_tests"
      "$build/bench/bench_cuda_kernels" "$build/bench/bench_train_step" "$build/bench/bench_tree_merge"
      "$build/bench/bench_blas")
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "gpu_bundle: $b is missing; run ./forge.sh build first" >&2; exit 1; }
done
# A build without CUDA (no nvcc when it was configured) builds every binary
# too: its bundle would fail every stage on the GPU machine.
# (ldd's whole output first: grep -q quits at its match, and ldd's SIGPIPE
# then failed the pipeline under pipefail)
forge_libs=$(ldd "$build/forge")
grep -q 'libcudart\.' <<<"$forge_libs" ||
  { echo "gpu_bundle: $build/forge does not load the CUDA runtime: configure the build with nvcc found (docs/cuda.md)" >&2; exit 1; }

# Copies (dereferenced) every library the given files load, except $skip, into $1;
# exit 1 naming a library ldd cannot find, or a file it cannot read.
copy_deps() {
  local dest=$1 listing
  shift
  listing=$(ldd "$@" 2>&1) || { echo "$listing" | grep -v '=>' >&2; echo "gpu_bundle: ldd failed on $*" >&2; exit 1; }
  if grep -q '=> not found' <<<"$listing"; then
    grep '=> not found' <<<"$listing" | sort -u >&2
    echo "gpu_bundle: a library above cannot be found on this machine (LD_LIBRARY_PATH?)" >&2
    exit 1
  fi
  echo "$listing" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r name path; do
      # (not cp -n: coreutils 9.2-9.4 exit 1 when it skips an existing file)
      [[ $name =~ $skip ]] || [ -e "$dest/$name" ] || cp -L "$path" "$dest/$name"
    done
}

# pack DIR FILE: DIR's contents as FILE (tar, xz -9), written beside it and
# renamed once whole (a full disk leaves no partial FILE to unpack).
pack() {
  tar cf - -C "$1" . | xz -9 -T1 >"$2.part"
  mv "$2.part" "$2"
}
mkdir -p "$out"
# An earlier version's bundles (gzip): the baseline and native builds, which
# a run may keep, converted; the others are made again below.
rm -f "$out/forge-gpu.tar.gz" "$out/openmpi.tar.gz"
for old in "$out/baseline.tar.gz" "$out/native.tar.gz"; do
  [ -f "$old" ] || continue
  gzip -dc "$old" | xz -9 -T1 >"${old%.gz}.xz.part" && mv "${old%.gz}.xz.part" "${old%.gz}.xz" && rm -f "$old"
done

rm -rf "$out/pkg" "$out/ompi"
# Unpacked folders go however this script ends (an interrupted run left
# ~100 MB in .gpu, past what a device call carries), and a bundle is made
# new or not at all (a stale one would be run as this build).
trap 'rm -rf "$out/pkg" "$out/ompi" "$out"/*.part' EXIT
rm -f "$out/forge-gpu.tar.xz"
mkdir -p "$out/pkg/bin" "$out/pkg/lib"
cp "${bins[@]}" "$out/pkg/bin/"
cp -r "$root/configs" "$out/pkg/"
# The CUDA libraries left to the GPU machine, by the names this build needs
# (libcudart.so.13, ...): gpu_checks.sh prints them and checks them first.
awk '$1 ~ /^lib(cudart|cublas|cublasLt|nccl)\./ {print $1}' <<<"$forge_libs" | sort -u | tr '\n' ' ' >"$out/pkg/CUDA_LIBS"
copy_deps "$out/pkg/lib" "${bins[@]}"
# BLIS is loaded with dlopen (src/backend/cpu/sgemm_library.hpp), so ldd does
# not list it; gpu_checks.sh puts pkg/lib on LD_LIBRARY_PATH, where forge finds
# it as libblis.so.4.
blis=$sys/blis-openmp/libblis.so.4
if [ -f "$blis" ]; then
  cp -L "$blis" "$out/pkg/lib/libblis.so.4"
  copy_deps "$out/pkg/lib" "$blis"
fi
echo "gpu_bundle: packing (xz -9, about a minute)"
pack "$out/pkg" "$out/forge-gpu.tar.xz"
echo "gpu_bundle: $out/forge-gpu.tar.xz ($(du -h "$out/forge-gpu.tar.xz" | cut -f1), $(ls "$out/pkg/lib" | wc -l) libraries)"

rm -f "$out/openmpi.tar.xz"
if [ "$mpi" = 0 ]; then
  echo "gpu_bundle: --no-mpi: no openmpi.tar.xz (the rl and publish stages need it)"
else
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
pack "$o" "$out/openmpi.tar.xz"
echo "gpu_bundle: $out/openmpi.tar.xz ($(du -h "$out/openmpi.tar.xz" | cut -f1))"
fi
rm -rf "$out/pkg" "$out/ompi"

# bench_build SRC BUILD DEST WHAT CMAKE_ARGS... -- TARGETS...: a Release
# build of the bench TARGETS from SRC in BUILD, packed with the file NOTE
# (its first line: what was built) into .gpu/NAME.tar.xz; on failure the
# log's tail and exit 1.
bench_build() {
  local src=$1 build=$2 name=$3 note=$4 what=$5
  shift 5
  local args=()
  while [ "$1" != -- ]; do args+=("$1"); shift; done
  shift
  echo "gpu_bundle: building the $name build, $what ($*)"
  if ! { cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release "${args[@]}" &&
    cmake --build "$build" -j"$(nproc)" --target "$@"; } >"$build.log" 2>&1; then
    tail -n 30 "$build.log" >&2
    echo "gpu_bundle: the build of $what failed" >&2
    exit 1
  fi
  local dest=$tmp/pack-$name
  mkdir -p "$dest"
  for target in "$@"; do cp "$build/bench/$target" "$dest/"; done
  echo "$what" >"$dest/$note"
  rm -rf "${out:?}/$name"  # an unpacked folder of earlier versions of this script
  pack "$dest" "$out/$name.tar.xz"
  echo "gpu_bundle: $out/$name.tar.xz ($(du -h "$out/$name.tar.xz" | cut -f1), $note $what)"
}

tmp=$(mktemp -d)  # the baseline's worktree and the builds
trap '[ -d "$tmp/baseline" ] && git -C "$root" worktree remove --force "$tmp/baseline" 2>/dev/null; rm -rf "$tmp" "$out/pkg" "$out/ompi" "$out"/*.part' EXIT
if [ -n "$baseline" ]; then
  git -C "$root" worktree add --detach --quiet "$tmp/baseline" "$rev"
  # forge's own libraries are linked in; the shared ones are this machine's,
  # which the bundle's lib/ already holds
  bench_build "$tmp/baseline" "$tmp/baseline/build" baseline REVISION "$rev" -- bench_cuda_kernels bench_train_step
fi
if [ -n "$native" ]; then
  bench_build "$root" "$tmp/native" native ARCH "$native" -DFORGE_CUDA=OFF -DFORGE_BUILD_TESTS=OFF \
    -DFORGE_NATIVE=ON -DFORGE_NATIVE_ARCH="$native" -- bench_train_step bench_tree_merge
fi
kept="from an earlier run: gpu_checks.sh will use it; remove it to skip that"
[ -n "$baseline" ] || [ ! -f "$out/baseline.tar.xz" ] || echo "gpu_bundle: keeping .gpu/baseline.tar.xz $kept"
[ -n "$native" ] || [ ! -f "$out/native.tar.xz" ] || echo "gpu_bundle: keeping .gpu/native.tar.xz $kept"
carry=$(du -sb "$out" | cut -f1)
echo "gpu_bundle: .gpu holds $((carry / 1048576)) MiB (a device call carries at most 64 MiB)"
if [ "$carry" -gt $((64 * 1048576)) ]; then
  echo "gpu_bundle: too much to carry: leave out openmpi.tar.xz (--no-mpi; only the rl and publish stages need it), or baseline.tar.xz" >&2
  exit 1
fi
echo "gpu_bundle: carry .gpu (and runs/demo/sft for the RL check) to the GPU machine; there run bash tools/gpu_checks.sh"
