#!/usr/bin/env bash
# cached-build.sh OUTPUTS -- INPUTS -- COMMAND: run a build COMMAND (a bash string) that writes the
# files OUTPUTS from INPUTS, or copy OUTPUTS from an earlier run's copy when nothing it depends on
# changed.
#
# Go caches compiled packages but links every binary again: on a fresh clone the devcluster's
# binaries (localkube, containerd, runc, gVisor, Helm, Kueue, the CNI plugins) took 60 s of
# linking on a 2-core machine before any test ran, with every input unchanged; copies take 4 s.
# The key is the contents of INPUTS (the module's go.mod, go.sum and local sources: the Make
# rule's prerequisites), the COMMAND with this checkout's path taken out (-trimpath builds do not
# depend on it), the Go toolchain and the environment Make exports to it. Anything else a build reads
# comes from the module cache by the versions go.sum pins.
#
# The copies live in ${ROLLOUTBATCH_CACHE:-$XDG_CACHE_HOME/rolloutbatch}/bin (as the images do,
# devcluster/images.py); delete that directory to build everything again.
set -euo pipefail

outputs=() inputs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do outputs+=("$1"); shift; done
shift
while [ $# -gt 0 ] && [ "$1" != "--" ]; do inputs+=("$1"); shift; done
shift
[ $# -eq 1 ] && [ ${#outputs[@]} -gt 0 ] || { echo "usage: $0 OUTPUTS... -- INPUTS... -- 'COMMAND'" >&2; exit 2; }
command=$1
root=$(pwd)

key=$( {
  printf '%s\n' "${command//$root/}"
  go version
  go env GOOS GOARCH CGO_ENABLED GOFLAGS GOEXPERIMENT
  for f in "${inputs[@]}"; do printf '%s ' "$f"; sha256sum < "$f"; done
  for f in "${outputs[@]}"; do basename "$f"; done
} | sha256sum | cut -c1-32)
cache=${ROLLOUTBATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rolloutbatch}/bin/$key

if [ -d "$cache" ]; then
  hit=1
  for f in "${outputs[@]}"; do [ -f "$cache/$(basename "$f")" ] || hit=0; done
  if [ "$hit" = 1 ]; then
    for f in "${outputs[@]}"; do
      mkdir -p "$(dirname "$f")"
      cp "$cache/$(basename "$f")" "$f.tmp.$$" && mv -f "$f.tmp.$$" "$f"   # mtime now: Make sees it new
    done
    echo "$(basename "${outputs[0]}")$([ ${#outputs[@]} -gt 1 ] && echo " (+$((${#outputs[@]} - 1)))"): from the cache ($cache)"
    exit 0
  fi
fi

echo "$command"
bash -c "$command"
tmp=$(mktemp -d "${cache}.XXXXXX" 2>/dev/null || { mkdir -p "$(dirname "$cache")"; mktemp -d "${cache}.XXXXXX"; })
for f in "${outputs[@]}"; do cp -p "$f" "$tmp/"; done
# whole or not at all: another build may be storing the same key
mv -T "$tmp" "$cache" 2>/dev/null || rm -rf "$tmp"
