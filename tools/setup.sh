#!/usr/bin/env bash
# Set-up of a Debian/Ubuntu machine for forge: installs (with apt-get) every
# package that the build, the tests and the main job need (and, with pip, the
# openai client the gateway's example agent uses), and reports whether
# the CUDA toolkit is present (it is found, never installed: without nvcc the
# build has the CPU backend only).
#
# Idempotent: packages are checked with dpkg-query first; when all are present
# it changes nothing and returns in about a second. `apt-get update` runs only
# when something is missing. Runs as root, or through sudo otherwise.
#
#   ./tools/setup.sh
set -euo pipefail

PACKAGES=(
  # build
  g++ cmake make pkg-config
  # MPI ranks
  libopenmpi-dev openmpi-bin
  # rollout store and checkpoints
  libhdf5-dev hdf5-tools
  # configuration
  libboost-program-options-dev
  # the gateway for black-box agents (HTTP server, JSON)
  libcpp-httplib-dev nlohmann-json3-dev
  # CPU backend: OpenBLAS built with OpenMP (one thread pool with our loops)
  libopenblas-openmp-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # reference oracles and offline analysis
  python3-torch python3-numpy python3-h5py python3-matplotlib
  # local Slurm for slurm/ and its test (srun --mpi=pmix: mpi_pmix.so is in
  # slurm-wlm-basic-plugins, which slurmd depends on)
  slurm-wlm munge
)

say() { printf 'setup: %s\n' "$*"; }

if ! command -v dpkg-query >/dev/null 2>&1; then
  say "dpkg-query not found: this script supports Debian and Ubuntu; install by hand:" >&2
  say "  ${PACKAGES[*]}" >&2
  exit 1
fi

installed() {
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" = "installed" ]
}

missing=()
for p in "${PACKAGES[@]}"; do
  installed "$p" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  say "all ${#PACKAGES[@]} packages are installed"
else
  say "installing ${#missing[@]} missing package(s): ${missing[*]}"
  if [ "$(id -u)" -eq 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    say "not root and no sudo: install these packages as root: ${missing[*]}" >&2
    exit 1
  fi
  # `env` passes the variable through sudo, which may reset the environment.
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
  for p in "${missing[@]}"; do
    installed "$p" || { say "package $p is still not installed" >&2; exit 1; }
  done
  say "installed: ${missing[*]}"
fi

# The black-box agent example and the gateway tests use the official `openai`
# client from PyPI, for the python3 first on PATH (the interpreter they run).
if python3 -c 'import openai' >/dev/null 2>&1; then
  say "python3 ($(command -v python3)): openai $(python3 -c 'import openai; print(openai.__version__)') is installed"
else
  say "installing the openai client from PyPI for $(command -v python3)"
  python3 -m pip install --quiet --disable-pip-version-check 'openai>=1.30'
  python3 -c 'import openai' || { say "the openai package is still not importable by python3" >&2; exit 1; }
fi

# CUDA toolkit: found, not installed. CMake (FORGE_CUDA=AUTO) looks in the same
# places: PATH, then /usr/local/cuda.
nvcc=""
if command -v nvcc >/dev/null 2>&1; then
  nvcc="$(command -v nvcc)"
else
  for candidate in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do
    if [ -x "$candidate" ]; then nvcc="$candidate"; break; fi
  done
fi
if [ -n "$nvcc" ]; then
  release="$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' | head -n1)"
  say "CUDA toolkit: nvcc found at $nvcc (release ${release:-unknown}); the CUDA backend will be built"
else
  say "CUDA toolkit: nvcc not found; the CPU backend only will be built"
fi
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  say "GPU: $(nvidia-smi -L | head -n1)"
else
  say "GPU: none visible (GPU-only tests skip themselves)"
fi
