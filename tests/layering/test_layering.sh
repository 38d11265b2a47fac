#!/usr/bin/env bash
# The layering check (tools/check_layering.py) passes on the tree, and fails
# on a copy of it with one forbidden include added back: a folder reaching up
# (env -> agent, the loop this layout removed; also in angle brackets and
# through ".."), a command including a backend's implementation, and src/
# including a header of tests/.
#
#   test_layering.sh SOURCE_DIR
set -euo pipefail
src_dir="$1"
check="$src_dir/tools/check_layering.py"
py=/usr/bin/python3
command -v "$py" >/dev/null || py=python3

"$py" "$check" --root "$src_dir"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Each case: a fresh copy, one line added to one file, the message expected.
expect_failure() {
  local file="$1" line="$2" want="$3" copy="$tmp/case"
  rm -rf "$copy"
  mkdir -p "$copy/docs" "$copy/tools"
  cp -r "$src_dir/src" "$src_dir/apps" "$copy/"
  cp "$src_dir/docs/architecture.md" "$copy/docs/"
  printf '%s\n' "$line" >>"$copy/$file"
  local out
  if out=$("$py" "$check" --root "$copy"); then
    echo "FAIL: the check accepted $file with: $line" >&2
    exit 1
  fi
  if ! grep -qF "$want" <<<"$out"; then
    echo "FAIL: the check rejected $file but did not say '$want':" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "rejected as expected: $file + $line"
}

expect_failure src/env/environment.hpp '#include "agent/agent_episode.hpp"' "env may not include agent"
expect_failure src/io_hdf5/rollout_store.hpp '#include "algo/policy_update.hpp"' "io_hdf5 may not include algo"
expect_failure apps/forge/cmd_train.cpp '#include "backend/cpu/cpu_backend.hpp"' "apps may not include backend/cpu"
expect_failure src/env/calc_env.hpp '#include <agent/agent_episode.hpp>' "env may not include agent"
expect_failure src/env/environment.hpp '#include "env/../agent/agent_episode.hpp"' 'has a ".." component'
expect_failure src/backend/cuda/cuda_compat.cuh '#include "emulation/backend_cases.hpp"' "is not a file of src/"
echo "layering: the check passes on the tree and rejects every forbidden include tried"
