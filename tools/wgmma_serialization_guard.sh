#!/bin/bash
# CUDA compiler launcher for forge_cuda (src/CMakeLists.txt): runs the
# compile it is given and fails it where ptxas reports that it serialized
# wgmma instructions (its C75xx notes, for example C7515 "wgmma.mma_async
# instructions are serialized due to ..." or C7519 "warpgroup.arrive
# injected"). ptxas prints those as information, not warnings, so
# --warning-as-error lets them through, yet each one strips a kernel of its
# asynchronous MMAs (docs/cuda.md, "wgmma"). The compile's output is passed
# on unchanged (to stderr).
out=$("$@" 2>&1)
rc=$?
[ -n "$out" ] && printf '%s\n' "$out" >&2
if [ "$rc" -eq 0 ] && grep -q "(C75[0-9][0-9])" <<<"$out"; then
  echo "error: ptxas serialized wgmma in this compile (the C75xx notes above); see docs/cuda.md, \"wgmma\"" >&2
  exit 1
fi
exit "$rc"
