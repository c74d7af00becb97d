#!/usr/bin/env bash
# scripts/gpu_measure.sh's control flow, without a GPU: the script runs in a scratch tree with
# stand-ins for jacond, ctest and nvidia-smi on PATH, and this test checks what a GPU session
# depends on:
#   - the items run in the order 1 2 3 4 6 5 7 8 9, each logged with its seconds;
#   - an item that reaches its cap (JACOND_GPU_CAP_<n>) is stopped with the processes it started,
#     logged STOPPED and marked done, and the later items still run;
#   - results.tar.gz holds every finished item's folder;
#   - the same command again (the next call on the warm machine) runs no item a second time;
#     JACOND_GPU_REDO=1 runs them all again;
#   - with JACOND (the real command) given and no GPU here: every jacond command line of the
#     script passes jacond's argument checks (exit 1 at the missing GPU, never 2, usage), so a
#     renamed flag is found here and not in the one GPU session. Its `--device cpu` runs are
#     asked as `--device cuda` (same flags), so nothing heavy runs.
# Usage: bash tests/scripts/test_gpu_measure.sh SCRATCH [JACOND]
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:?usage: test_gpu_measure.sh SCRATCH [JACOND]}
real_jacond=${2:-}
[ -z "$real_jacond" ] || real_jacond=$(realpath "$real_jacond")
gpu_here=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then gpu_here=1; fi
rm -rf "$work" && mkdir -p "$work/scripts" "$work/build-gpu/experiments" "$work/bin"
cp "$src/scripts/gpu_measure.sh" "$work/scripts/"
echo 'export JACOND_STAND_IN_ENV=1' >"$work/build-gpu/env.sh"
fail() { echo "test_gpu_measure: $*" >&2; exit 1; }

# The jacond stand-in writes --out DIR/results.csv; the run whose --out folder is named $SLOW_OUT
# first records its pid and sleeps $SLOW_SECONDS.
cat >"$work/build-gpu/experiments/jacond" <<'STANDIN'
#!/usr/bin/env bash
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[i]}" = --out ] || continue
  dir=${args[i + 1]}
  if [ "$(basename "$dir")" = "${SLOW_OUT:-}" ]; then echo $$ >"$SLOW_PID"; sleep "$SLOW_SECONDS"; fi
  mkdir -p "$dir" && echo "stand_in,$1" >"$dir/results.csv"
done
STANDIN
cat >"$work/bin/nvidia-smi" <<'STANDIN'
#!/usr/bin/env bash
if [[ "$*" == *noheader* ]]; then echo 143771; else printf 'name, memory.total [MiB]\nstand-in, 143771 MiB\n'; fi
STANDIN
printf '#!/usr/bin/env bash\necho "ctest stand-in $*"\n' >"$work/bin/ctest"
chmod +x "$work/build-gpu/experiments/jacond" "$work/bin/"*
export PATH=$work/bin:$PATH SLOW_PID=$work/slow.pid

run() {  # run CALL: one device-tool call, its $OUT in $work/CALL
  (cd "$work" && OUT=$work/$1 bash scripts/gpu_measure.sh) >"$work/$1.stdout" 2>&1 ||
    fail "call $1 exited $? ($work/$1.stdout)"
}
started() { grep -oE '^=== item [0-9] \(item[0-9]_[a-z_]+\), cap' "$1" | grep -oE 'item [0-9]' | tr -dc '0-9'; }

# Call 1: item 3 (the ViT-S exact run, --out .../vit-s) outlives its 2 s cap.
SLOW_OUT=vit-s SLOW_SECONDS=120 JACOND_GPU_CAP_3=2 run call1
log=$work/call1/gpu_measure.log
[ -f "$log" ] || fail "no gpu_measure.log in \$OUT"
[ "$(started "$log")" = 123465789 ] || fail "call 1 started items $(started "$log"), expected 123465789"
grep -q '^=== item 3 STOPPED at its cap of 2 s' "$log" || fail "item 3 was not logged as stopped at its cap"
[ -s "$SLOW_PID" ] || fail "the slow stand-in never started"
sleep 1  # a zombie (killed, not yet reaped by an init that may not be one) does not run
state=$(awk '{print $3}' "/proc/$(cat "$SLOW_PID")/stat" 2>/dev/null || true)
[ -z "$state" ] || [ "$state" = Z ] || fail "item 3's jacond still runs after its cap (state $state)"
for n in 1 2 3 4 5 6 7 8 9; do
  grep -qE "^=== item $n took [0-9]+ s" "$log" || fail "item $n has no seconds in the log"
  [ -e "$work/build-gpu/gpu-measure-done/$n" ] || fail "item $n not marked done"
done
listing=$(tar tzf "$work/call1/results.tar.gz")
for d in bench-dense-t16 bench-dense-t2 bench-train lanczos-vit-b-timm vit-b certify-cuda certify-cpu skipless-cuda lanczos-vit-s-ours; do
  grep -q "^\./$d/results.csv$" <<<"$listing" || fail "results.tar.gz lacks $d/results.csv"
done
if grep -q '^\./vit-s/results.csv$' <<<"$listing"; then fail "the stopped item's results.csv was written"; fi

# Call 2 on the warm machine: nothing runs again.
run call2
[ -z "$(started "$work/call2/gpu_measure.log")" ] || fail "call 2 ran items again: $(started "$work/call2/gpu_measure.log")"
[ "$(grep -c 'done by an earlier call' "$work/call2/gpu_measure.log")" = 9 ] || fail "call 2 did not skip all nine items"

# JACOND_GPU_REDO=1 with one item picked runs just that one.
JACOND_GPU_REDO=1 JACOND_GPU_ITEMS=3 run call3
[ "$(started "$work/call3/gpu_measure.log")" = 3 ] || fail "REDO with JACOND_GPU_ITEMS=3 started $(started "$work/call3/gpu_measure.log")"
tar tzf "$work/call3/results.tar.gz" | grep -q '^\./vit-s/results.csv$' || fail "item 3 rerun wrote no results"

# The real command's argument checks, on every jacond command line of the script.
if [ -z "$real_jacond" ]; then
  echo "test_gpu_measure: order, caps, resume and redo as documented (no JACOND given: flags not checked)"
  exit 0
fi
if [ "$gpu_here" = 1 ]; then
  echo "test_gpu_measure: order, caps, resume and redo as documented (a GPU is here: the real commands would run, flags not checked)"
  exit 0
fi
cat >"$work/build-gpu/experiments/jacond" <<STANDIN
#!/usr/bin/env bash
args=("\$@")
for ((i = 0; i < \${#args[@]}; i++)); do [ "\${args[i]}" = cpu ] && args[i]=cuda; done
rc=0
timeout 120 "$real_jacond" "\${args[@]}" >>"$work/flags.log" 2>&1 || rc=\$?
echo "rc=\$rc jacond \${args[*]}" >>"$work/flags.rc"
STANDIN
: >"$work/flags.rc"
JACOND_GPU_REDO=1 run call4
[ "$(wc -l <"$work/flags.rc")" -ge 12 ] || fail "only $(wc -l <"$work/flags.rc") jacond command lines ran ($work/flags.rc)"
if grep -q "built without the CUDA back end" "$work/flags.log"; then
  echo "test_gpu_measure: order, caps, resume and redo as documented (this jacond has no CUDA back end: flags not checked)"
  exit 0
fi
bad=$(grep -v '^rc=1 ' "$work/flags.rc" || true)
[ -z "$bad" ] || fail "command lines that did not stop at the missing GPU (exit 2 is a usage error): $bad; see $work/flags.log"
echo "test_gpu_measure: order, caps, resume and redo as documented; all $(wc -l <"$work/flags.rc") jacond command lines pass jacond's argument checks"
