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
#     asked as `--device cuda` (same flags), so nothing heavy runs;
#   - then every command for real, on the CPU at CI size (same subcommands, flags and folders),
#     and `jacond recipe gpu` on what the script brought back: the page has the device, each
#     item, the commands as run, the ViT-S κ and the images/s ratio of the files' cells; a log
#     alone gives "not measured" with the log's reason; no log is one line and exit 1.
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
  if [ "$(basename "$dir")" = "${SLOW_OUT:-}" ]; then
    echo $$ >"$SLOW_PID"; sleep "$SLOW_SECONDS" & echo $! >"$SLOW_PID.child"; wait
  fi
  mkdir -p "$dir" && echo "stand_in,$1" >"$dir/results.csv"
done
STANDIN
cat >"$work/bin/nvidia-smi" <<'STANDIN'
#!/usr/bin/env bash
if [[ "$*" == *noheader* ]]; then echo 143771; else printf 'name, memory.total [MiB]\nstand-in, 143771 MiB\n'; fi
STANDIN
# The ctest stand-in says whether JACOND_EXPECT_GPU reached it, lists the tests named in
# $CTEST_SKIPPED as ctest lists tests that did not run, and exits $CTEST_RC.
cat >"$work/bin/ctest" <<'STANDIN'
#!/usr/bin/env bash
echo "ctest stand-in JACOND_EXPECT_GPU=${JACOND_EXPECT_GPU:-unset} $*"
if [ -n "${CTEST_SKIPPED:-}" ]; then
  echo "The following tests did not run:"
  for t in $CTEST_SKIPPED; do printf '\t%3d - %s (Skipped)\n' 7 "$t"; done
fi
exit "${CTEST_RC:-0}"
STANDIN
chmod +x "$work/build-gpu/experiments/jacond" "$work/bin/"*
export PATH=$work/bin:$PATH SLOW_PID=$work/slow.pid

run() {  # run CALL: one device-tool call, its $OUT in $work/CALL
  (cd "$work" && OUT=$work/$1 bash scripts/gpu_measure.sh) >"$work/$1.stdout" 2>&1 ||
    fail "call $1 exited $? ($work/$1.stdout)"
}
started() { grep -oE '^=== item [0-9] \(item[0-9]_[a-z_]+\), cap' "$1" | grep -oE 'item [0-9]' | tr -dc '0-9'; }

# Call 1: item 3 (the ViT-S exact run, --out .../vit-s) outlives its 4 s cap; the tests fail (exit 8).
SLOW_OUT=vit-s SLOW_SECONDS=120 JACOND_GPU_CAP_3=4 CTEST_RC=8 run call1
log=$work/call1/gpu_measure.log
[ -f "$log" ] || fail "no gpu_measure.log in \$OUT"
[ "$(started "$log")" = 123465789 ] || fail "call 1 started items $(started "$log"), expected 123465789"
grep -q '^=== item 3 STOPPED at its cap of 4 s' "$log" || fail "item 3 was not logged as stopped at its cap"
grep -qE '^=== item 1 took [0-9]+ s \(rc 8\)$' "$log" || fail "item 1 hid its failing tests: $(grep '^=== item 1 took' "$log")"
grep -q '^ctest stand-in JACOND_EXPECT_GPU=1 -j4 -R ' "$log" || fail "item 1's ctest ran without JACOND_EXPECT_GPU=1"
# The failing tests' diagnosis (library_mix, a helper the item calls in its child shell) ran.
grep -q -- '--- one Python process maps ' "$log" || fail "item 1's failures have no library_mix diagnosis in the log"
if grep -q 'command not found' "$log"; then fail "an item called a helper it cannot see: $(grep 'command not found' "$log")"; fi
[ -s "$SLOW_PID" ] || fail "the slow stand-in never started"
sleep 1  # a zombie (killed, not yet reaped by an init that may not be one) does not run
for pid_file in "$SLOW_PID" "$SLOW_PID.child"; do  # the stand-in and the process it started
  state=$(awk '{print $3}' "/proc/$(cat "$pid_file")/stat" 2>/dev/null || true)
  [ -z "$state" ] || [ "$state" = Z ] || fail "item 3's jacond (or its child) still runs after its cap (state $state)"
done
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
# The listing first: under pipefail, grep -q leaving at its first match can end tar by SIGPIPE,
# which failed this check now and then on a loaded machine though the file was there.
listing=$(tar tzf "$work/call3/results.tar.gz")
grep -q '^\./vit-s/results.csv$' <<<"$listing" || fail "item 3 rerun wrote no results"

# Item 1 on a GPU machine where tests skipped: only no_gpu_tests (the no-GPU path's own tests) may;
# any other fails the item (rc 1 where the tests passed) and is named in the log.
no_gpu=$(sed -n 's/^no_gpu_tests="\(.*\)"$/\1/p' "$src/scripts/gpu_measure.sh")
[ "$(wc -w <<<"$no_gpu")" = 2 ] || fail "gpu_measure.sh's no_gpu_tests: '$no_gpu'"
for t in $no_gpu; do  # jacond recipe gpu counts the same tests as skipped by design
  grep -qF "\"$t\"" "$src/experiments/recipes/jacond_recipes/gpu.py" || fail "gpu.py's NO_GPU_TESTS lacks $t"
done
CTEST_SKIPPED=$no_gpu JACOND_GPU_REDO=1 JACOND_GPU_ITEMS=1 run call-skip-by-design
log=$work/call-skip-by-design/gpu_measure.log
grep -qE '^=== item 1 took [0-9]+ s \(rc 0\)$' "$log" || fail "no_gpu_tests skipped failed item 1: $(grep '^=== item 1 took' "$log")"
if grep -q 'did not run on this GPU machine' "$log"; then fail "no_gpu_tests were called missing: $(grep 'did not run on' "$log")"; fi
CTEST_SKIPPED="$no_gpu AdamWCuda.MatchesLibTorchsAdamWOnTheGpuAndTheCpu" JACOND_GPU_REDO=1 JACOND_GPU_ITEMS=1 run call-skip
log=$work/call-skip/gpu_measure.log
grep -qE '^=== item 1 took [0-9]+ s \(rc 1\)$' "$log" || fail "a skipped GPU test passed item 1: $(grep '^=== item 1 took' "$log")"
grep -qx 'GPU tests that did not run on this GPU machine (1): AdamWCuda.MatchesLibTorchsAdamWOnTheGpuAndTheCpu' "$log" ||
  fail "item 1 does not name the skipped test alone: $(grep 'did not run on' "$log")"

# A call near its end: items 1 and 2 need more than the 20 s left (45 s by default) and wait for the
# next call; item 3 (need 1 s) starts, is cut at the call's end, not its 300 s cap, and stays
# unmarked; everything after it waits too. (20 s: room for a loaded machine to reach item 3.)
SLOW_OUT=vit-s SLOW_SECONDS=120 JACOND_GPU_REDO=1 JACOND_GPU_DEADLINE=$(($(date +%s) + 20)) JACOND_GPU_MARGIN=0 \
  JACOND_GPU_NEED_3=1 run call-end
log=$work/call-end/gpu_measure.log
grep -qE "^=== item 3 cut at this call's end after [0-9]+ s: not marked done" "$log" || fail "item 3 was not cut at the call's end"
[ "$(grep -c 'left for the next call' "$log")" = 8 ] || fail "not all other items waited for the next call: $(grep '^===' "$log")"
[ -z "$(ls "$work/build-gpu/gpu-measure-done")" ] || fail "items marked done in a call that ran none: $(ls "$work/build-gpu/gpu-measure-done")"

# A fresh machine without the build: exit 3, one line, nothing marked.
mv "$work/build-gpu/experiments/jacond" "$work/jacond.kept"
rc=0
(cd "$work" && OUT=$work/call-nobuild bash scripts/gpu_measure.sh) >"$work/call-nobuild.stdout" 2>&1 || rc=$?
mv "$work/jacond.kept" "$work/build-gpu/experiments/jacond"
[ "$rc" = 3 ] || fail "gpu_measure.sh without a build exited $rc, expected 3"
grep -q "run scripts/gpu_build.sh first" "$work/call-nobuild/gpu_measure.log" || fail "no build: the log does not say so"
[ -z "$(ls "$work/build-gpu/gpu-measure-done")" ] || fail "items marked done without a build"

# The real command's argument checks, on every jacond command line of the script.
if [ -z "$real_jacond" ]; then
  echo "test_gpu_measure: order, caps, resume and redo as documented (no JACOND given: flags not checked)"
  exit 0
fi
# With a GPU here the flag check would run the real commands on it: skipped, the rest still runs.
if [ "$gpu_here" = 1 ]; then
  flags="a GPU is here (the real commands would run on it): flags not checked"
else
cat >"$work/build-gpu/experiments/jacond" <<STANDIN
#!/usr/bin/env bash
args=("\$@")
for ((i = 0; i < \${#args[@]}; i++)); do [ "\${args[i]}" = cpu ] && args[i]=cuda; done
rc=0
timeout 120 "$real_jacond" "\${args[@]}" >"$work/flags.one" 2>&1 || rc=\$?
tee -a "$work/flags.log" <"$work/flags.one"
nocuda=""
if grep -q "built without the CUDA back end" "$work/flags.one"; then nocuda="nocuda "; fi
echo "rc=\$rc \${nocuda}jacond \${args[*]}" >>"$work/flags.rc"
exit "\$rc"
STANDIN
: >"$work/flags.rc"
JACOND_GPU_REDO=1 run call4
[ "$(wc -l <"$work/flags.rc")" -ge 12 ] || fail "only $(wc -l <"$work/flags.rc") jacond command lines ran ($work/flags.rc)"
# Each line on its own: exit 1 at the missing GPU; or, in a build without the CUDA back end, the
# line's own "built without" refusal (its options were parsed first, so a renamed flag still shows).
bad=$(grep -vE '^rc=1 |^rc=[12] nocuda ' "$work/flags.rc" || true)
[ -z "$bad" ] || fail "command lines that did not stop at the missing GPU (exit 2 is a usage error): $bad; see $work/flags.log"
flags="all $(wc -l <"$work/flags.rc") jacond command lines pass jacond's argument checks"
nocuda=$(grep -c ' nocuda ' "$work/flags.rc" || true)
if [ "$nocuda" != 0 ]; then flags="$flags ($nocuda of them then met this build's missing CUDA back end)"; fi
fi  # gpu_here

# `jacond recipe gpu` on what gpu_measure.sh brings back. The stand-in now runs each command for
# real on the CPU at CI size: same subcommand, flags and --out folder, smaller values.
cat >"$work/build-gpu/experiments/jacond" <<STANDIN
#!/usr/bin/env bash
declare -A small=([--sizes]=1024 [--n]=8 [--d]=16 [--heads]=2 [--device]=cpu [--threads]=1 [--steps]=3 [--warmup]=1
                  [--batch]=8 [--seconds]=5 [--lanczos-seconds]=5 [--repeat]=1 [--python]=/usr/bin/python3
                  [--dim]=16 [--depth]=1)
args=("\$@")
for ((i = 1; i < \${#args[@]}; i++)); do
  flag=\${args[i - 1]}
  if [ -n "\${small[\$flag]:-}" ]; then args[i]=\${small[\$flag]}; fi
  if [ "\$flag" = --sizes ] && [[ "\${args[i]}" == vit-* || "\$1" = bench && "\$2" = lanczos ]]; then args[i]=n8d16h2; fi
done
# bench train's model at CI size, where the command left it at its defaults (item 4's first call).
if [ "\$1 \$2" = "bench train" ] && [[ " \$* " != *" --dim "* ]]; then args+=(--dim 16 --depth 1 --heads 2); fi
exec "$real_jacond" "\${args[@]}"
STANDIN
JACOND_GPU_REDO=1 run call5
page() {  # page DIR NAME: `jacond recipe gpu` on DIR, the page in $md
  "$real_jacond" recipe gpu --work "$1" --out "$work/report-$2" >"$work/recipe-$2.out" 2>&1 ||
    fail "jacond recipe gpu on $2 exited $? ($work/recipe-$2.out)"
  md=$work/report-$2/README.md
}
render_log() {  # render_log CALL [results]: the page of CALL's log (and its results.tar.gz, unpacked)
  mkdir -p "$work/render-$1" && cp "$work/$1/gpu_measure.log" "$work/render-$1/gpu_measure-1.log"
  if [ "${2:-}" = results ]; then tar xzf "$work/$1/results.tar.gz" -C "$work/render-$1"; fi
  page "$work/render-$1" "$1"
}
has() { grep -qF -- "$1" "$md" || fail "the GPU page lacks '$1' ($md)"; }
cell() {  # cell FILE COLUMN KEY VALUE [KEY VALUE]: the first row's COLUMN where every KEY is VALUE
  awk -F, -v col="$2" -v k1="$3" -v v1="$4" -v k2="${5:-}" -v v2="${6:-}" '
    NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $c[k1] == v1 && (k2 == "" || $c[k2] == v2) { print $c[col]; exit }' "$1"  # no quoted commas before COLUMN
}
num() { awk -v f="$1" -v x="$2" -v y="${3:-1}" 'BEGIN { printf f, x / y }'; }  # num FORMAT X [Y]: X/Y as Python's format writes it
numcell() {  # numcell FILE COLUMN KEY VALUE [KEY VALUE]: that cell, which must be a number (no match: cell prints
  # nothing, which num would print as 0, a value the page always holds)
  local v; v=$(cell "$@")
  [[ $v =~ ^[-+]?[0-9.]+([eE][-+]?[0-9]+)?$ ]] || fail "no number in $1, column $2 where $3 = $4: '$v'"
  echo "$v"
}
render_log call5 results
render=$work/render-call5
has "stand-in, 143771 MiB"
has "jacond block --init timm --n 197 --d 384 --heads 6 --matrices K_sa --method dense --device cuda --threads 16"
for n in 1 2 3 4 5 6 7 8 9; do grep -qE "^\| $n \| .* \| [0-9]+ \| 0 \|  \|$" "$md" || fail "the GPU page has no row for item $n"; done
# Numbers are the files' cells: the ViT-S κ (4 digits) and jacond/PyTorch images/s (3 digits).
kappa=$(numcell "$render/vit-s/results.csv" kappa matrix K_sa) || exit 1
has "| $(num %.4g "$kappa") |"
kappa=$(numcell "$render/vit-s-ours/results.csv" kappa matrix K_sa) || exit 1  # item 3's second run, `ours`
has "## 2b. The same under \`ours\`"
has "| ours | dense-lu-lanczos | exact |"
has "| $(num %.4g "$kappa") |"
train=$render/bench-train/bench_train.csv
ours=$(numcell "$train" images_per_s route jacond optimizer adamw) || exit 1
theirs=$(numcell "$train" images_per_s route pytorch) || exit 1
has "**$(num %.3g "$ours" "$theirs")×**"
has "- ATen operations in one AdamW step (nested included): model pass jacond "
# Item 4's tracking call (the stand-in runs it on the CPU, so there is no GPU time to compare).
has "- One tracking call (K_sa,K_sab,K_ffn, "
has "; not timed on the host as well: this run tracked on the host already."
if grep -q "Not measured" "$md"; then fail "an item with results is called not measured: $(grep "Not measured" "$md")"; fi
# Call 1's log (item 3 stopped at its 4 s cap): each item is not measured, and why.
render_log call1
has "**Not measured** (item 3, ViT-S exact κ(K_sa)): stopped at its cap of 4 s."
grep -qE '^\*\*Not measured\*\* \(item 4, training images/s vs PyTorch\): ran [0-9]+ s, exit 0, and wrote no result\.$' "$md" ||
  fail "the GPU page does not say item 4 ran and wrote no result ($md)"
# The flag-check call's log: each item ran and failed at the missing GPU; the page quotes its error.
render_log call4
# (exit 1 at the missing GPU; 2 where this jacond has no CUDA back end, as under the sanitizers)
grep -qE '^\*\*Not measured\*\* \(item 3, ViT-S exact κ\(K_sa\)\): ran [0-9]+ s, exit [12], and wrote no result; it said `jacond block: error: --device cuda' "$md" ||
  fail "the GPU page does not quote item 3's error ($md)"

# Item 1's skipped tests on the page: the one that should have run counted and named, those that
# run only without a GPU counted apart.
render_log call-skip
has "**1 GPU test did not run** (skipped on the GPU machine: it measured nothing): \`AdamWCuda.MatchesLibTorchsAdamWOnTheGpuAndTheCpu\`; 2 more skipped by design"
render_log call-skip-by-design
has "Every GPU test ran, except the 2 that check the no-GPU path (skipped by design)."

# The near-the-end call's log: item 3 was cut by the call, the others not reached.
render_log call-end
has "**Not measured** (item 3, ViT-S exact κ(K_sa)): started, and cut off by its call's time limit."
has "**Not measured** (item 4, training images/s vs PyTorch): not reached in the session's device time."

# The rows only a GPU writes, made here from the CPU's files (pandas, not the page's code): the
# dense mixed row renamed as the GPU's exact route, and the matrix-free bracket copied into the
# device columns. The page's verdicts are then the cells' ratios.
cp -r "$render" "$work/render-gpu"
/usr/bin/python3 - "$work/render-gpu" <<'PY'
import sys
import pandas as pd
w = sys.argv[1]
p = f"{w}/bench-dense-t16/bench_dense.csv"
d = pd.read_csv(p, float_precision="round_trip", keep_default_na=False)
d.loc[d["route"] == "jacond-mixed-kappa", "route"] = "jacond-exact-kappa-cuda"
swept = d[d["route"] == "jacond-exact-kappa-cuda"].copy()  # a sweep variant's row (JACOND_CUDA_LU_SOLVES)
swept["route"] = "jacond-exact-kappa-cuda-assembled-trsv"
pd.concat([d, swept]).to_csv(p, index=False)
p = f"{w}/lanczos-vit-b-timm/bench_lanczos.csv"
d = pd.read_csv(p, float_precision="round_trip")
d["device"], d["device_status"] = "cuda", d["status"]
d["device_kappa_lo"], d["device_kappa_hi"] = d["kappa_lo"], d["kappa_hi"] * 1.001
d["device_t_total_s"], d["device_speedup"] = d["t_total_s"] / 4, 4.0
d.to_csv(p, index=False)
PY
page "$work/render-gpu" gpu
speedup=$(numcell "$work/render-gpu/bench-dense-t16/bench_dense.csv" cpu_exact_over_this route jacond-exact-kappa-cuda) || exit 1
has "on 1 threads: **$(num %.3g "$speedup")×** (misses the ≥ 20× target), κ agrees with the CPU's."
has "GPU exact route (K copied from the host, σ_min sweep by getrs) against the CPU's exact route on 1 threads"
has "GPU exact route (assembled on the GPU, σ_min sweep by trsv) against the CPU's exact route on 1 threads"
lo=$(numcell "$work/render-gpu/lanczos-vit-b-timm/bench_lanczos.csv" device_kappa_lo init timm) || exit 1
hi=$(numcell "$work/render-gpu/lanczos-vit-b-timm/bench_lanczos.csv" device_kappa_hi init timm) || exit 1
has "GPU bracket width κ_hi/κ_lo = **$(num %.5g "$hi" "$lo")**"
has "(**4×**)"
grep -qE 'end to end: \*\*[0-9.]+ s\*\* \((within|over) the 5 s target\), κ in \[' "$md" ||
  fail "the ViT-B block command has no verdict on the page ($md)"

# No log: one line, exit 1, no page.
rc=0
"$real_jacond" recipe gpu --work "$work/nothing" --out "$work/report-none" >"$work/recipe-none.out" 2>"$work/recipe-none.err" || rc=$?
[ "$rc" = 1 ] || fail "jacond recipe gpu without logs exited $rc, expected 1"
grep -q "no gpu_measure\*.log in" "$work/recipe-none.err" || fail "no-log error: $(cat "$work/recipe-none.err")"
[ ! -e "$work/report-none/README.md" ] || fail "a page was written without logs"
echo "test_gpu_measure: order, caps, resume and redo as documented; $flags; jacond recipe gpu renders the results"
