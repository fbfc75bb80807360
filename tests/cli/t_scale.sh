# tpusim scale (docs/pods.md): the ResNet-50 pod example over v2 slices with time to train, cost and GPUs;
# JSON; the chart files; bad command lines. Sourced by tests/cli/run.sh ($BIN, expect, ok, bad, $out).
sc_dir=$(mktemp -d /tmp/tpusim-scale.XXXXXX)
has() { if grep -q -- "$1" "$out"; then ok; else bad "output lacks '$1'"; sed 's/^/    /' "$out" | head -20 >&2; fi; }
RN=examples/resnet50_pod/step_b32.hlo
expect 0 "$BIN" scale --help
for o in --slices --per-core-batch --global-batch --dataset-size --epochs --price --gpus --gpu-count --keep-groups \
         --json --svg --html; do has "$o"; done
expect 0 "$BIN" scale $RN --slices v2-8,v2-32,v2-128,v2-256,v2-512 --dataset-size 1281167 --epochs 90 \
    --price v2-8=1.125,v2=1.50,V100=2.48 --svg "$sc_dir/s.svg" --html "$sc_dir/s.html"
has "weak scaling, 32 samples per device per step"
for r in "v2-8 " "v2-32 " "v2-128 " "v2-256 " "v2-512 " "8x V100" "8x A100" "8x H100"; do has "^$r"; done
has "speed-up: samples/s against v2-8"
has "cost/run"
if grep -q '<svg id="scaling"' "$sc_dir/s.svg" && grep -q 'id="table"' "$sc_dir/s.html"; then ok; else bad "chart files"; fi
expect 0 "$BIN" scale $RN --slices v2-8,v2-512 --gpus none --json
has '"scaling": "weak"'
has '"name": "v2-512"'
if grep -q 'V100' "$out"; then bad "--gpus none still has GPU rows"; else ok; fi
# what the command refuses
expect 2 "$BIN" scale $RN
has "--slices is required"
expect 2 "$BIN" scale $RN --slices v3-12
has "v3 slices come in 8, 32, 64"
expect 2 "$BIN" scale $RN --slices v2-8 --per-core-batch 64
has "takes 32 samples per device; 64 are needed here: put {b} in the program's name"
expect 2 "$BIN" scale $RN --slices v2-8 --dataset-size 100
has "go together"
expect 2 "$BIN" scale $RN --slices 2xv2-512
has "Multislice runs on v4 and later"
rm -rf "$sc_dir"
