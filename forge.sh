#!/usr/bin/env bash
# The entry point of the README.
#
#   ./forge.sh demo [--key=value ...]   set up, build, run the main job
#   ./forge.sh test [ctest args ...]    set up, build, run every test
#   ./forge.sh build                    configure and build into build/
#
# demo runs `./build/forge sft --config configs/sft_demo.ini`; extra arguments
# are passed to it as overrides (e.g. --optim.lr=3e-4). test passes extra
# arguments to ctest (e.g. `./forge.sh test -L unit`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

usage() {
  cat <<'USAGE'
Usage: ./forge.sh <command> [args]

Commands:
  demo [--key=value ...]  install what is missing (tools/setup.sh), build, then run
                          the main job: ./build/forge sft --config configs/sft_demo.ini
                          (extra arguments override the config)
  test [ctest args ...]   install what is missing, build, then run all tests:
                          ctest --test-dir build --output-on-failure -j2
                          (e.g. ./forge.sh test -L unit)
  build                   configure and build into build/ (Release)
USAGE
}

build() {
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
  cmake --build build -j"$(nproc)"
}

command="${1:-}"
case "$command" in
  demo)
    shift
    ./tools/setup.sh
    build
    ./build/forge sft --config configs/sft_demo.ini "$@"
    ;;
  test)
    shift
    ./tools/setup.sh
    build
    ctest --test-dir build --output-on-failure -j2 "$@"
    ;;
  build)
    shift
    if [ "$#" -gt 0 ]; then
      echo "forge.sh: build takes no arguments" >&2
      usage >&2
      exit 2
    fi
    build
    ;;
  -h|--help|help)
    usage
    ;;
  "")
    usage >&2
    exit 2
    ;;
  *)
    echo "forge.sh: unknown command '$command'" >&2
    usage >&2
    exit 2
    ;;
esac
