# tpusim run on several devices (docs/runtime.md): a jax pmap program compiled for 4 partitions, --replicas on
# a module naming no counts, per-device inputs from an .npz, outputs per device, a failing device (exit 1).
# Sourced by tests/cli/run.sh ($BIN, expect, ok, bad).
out=$CLI_OUT
rt_dir=$(mktemp -d /tmp/tpusim-rt.XXXXXX)
has() { if grep -q -- "$1" "$out"; then ok; else bad "output lacks '$1'"; sed 's/^/    /' "$out" | head -20 >&2; fi; }

# jax.pmap(lambda x: psum(x, 'i') + axis_index('i')) as XLA:CPU compiled it (num_partitions=4)
cat > "$rt_dir/pmap.hlo" <<'EOF'
HloModule jit__fun, is_scheduled=true, entry_computation_layout={(f32[1,3]{1,0})->f32[1,3]{1,0}}, num_partitions=4

%region_0.0 (psum.0: f32[], psum.1: f32[]) -> f32[] {
  %psum.0 = f32[] parameter(0)
  %psum.1 = f32[] parameter(1)
  ROOT %add.0 = f32[] add(%psum.0, %psum.1)
}

%fused_computation (param_0.1: f32[3], param_1.4: u32[]) -> f32[1,3] {
  %param_0.1 = f32[3]{0} parameter(0)
  %param_1.4 = u32[] parameter(1)
  %constant.6 = u32[] constant(3)
  %and.1 = u32[] and(%param_1.4, %constant.6)
  %axis_index.16 = s32[] convert(%and.1)
  %convert_element_type.4 = f32[] convert(%axis_index.16)
  %add.11 = f32[3]{0} broadcast(%convert_element_type.4), dimensions={}
  %add.10 = f32[3]{0} add(%param_0.1, %add.11)
  ROOT %bitcast.2 = f32[1,3]{1,0} bitcast(%add.10)
}

ENTRY %main.0_spmd (param.1: f32[1,3]) -> f32[1,3] {
  %param.1 = f32[1,3]{1,0} parameter(0), sharding={devices=[4,1]<=[4]}
  %axis_index.12 = u32[] partition-id()
  %bitcast = f32[3]{0} bitcast(%param.1)
  %psum.7 = f32[3]{0} all-reduce(%bitcast), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%region_0.0
  ROOT %add_bitcast_fusion = f32[1,3]{1,0} fusion(%psum.7, %axis_index.12), kind=kLoop, calls=%fused_computation
}
EOF
expect 0 "$BIN" run "$rt_dir/pmap.hlo" --random-inputs --out "$rt_dir/o"
has "on 4 devices (1 replica x 4 partitions)"; has "out0 dev3"; has "1 all-reduce"; has "modelled ICI time"
if [ -f "$rt_dir/o/dev3/out0.npy" ]; then ok; else bad "no $rt_dir/o/dev3/out0.npy"; fi
expect 2 "$BIN" run "$rt_dir/pmap.hlo" --random-inputs --replicas 2
has "compiled for 1 replica x 4 partitions"
expect 0 "$BIN" run --help
has "--replicas N"
if command -v python3 >/dev/null && python3 -c 'import numpy' 2>/dev/null; then
  python3 -c '
import numpy as np, sys
d = sys.argv[1]
np.savez(d + "/in.npz", arg0=np.ones((1, 3), np.float32), arg0_dev2=np.full((1, 3), 5, np.float32))
np.savez(d + "/bad.npz", arg0_dev0=np.ones((1, 3), np.float32))' "$rt_dir"
  expect 0 "$BIN" run "$rt_dir/pmap.hlo" --inputs "$rt_dir/in.npz" --out "$rt_dir/o2"
  has "out0 dev2  f32\[1,3\]             min 10"
  if python3 -c '
import numpy as np, sys
d = sys.argv[1]
for k in range(4): assert (np.load(d + "/o2/dev%d/out0.npy" % k) == 8 + k).all()' "$rt_dir"; then ok; else bad "per-device outputs of pmap.hlo"; fi
  expect 2 "$BIN" run "$rt_dir/pmap.hlo" --inputs "$rt_dir/bad.npz"
  has "neither arg0_dev1 nor arg0"
fi

# a module naming no counts: --replicas 3 runs three replicas; the sum is the same on every device
cat > "$rt_dir/sum.hlo" <<'EOF'
HloModule sum
add { a = s32[] parameter(0)
 b = s32[] parameter(1)
 ROOT r = s32[] add(a, b) }
ENTRY e {
 r = u32[] replica-id()
 s = s32[] convert(r)
 ROOT a = s32[] all-reduce(s), replica_groups={}, to_apply=add
}
EOF
expect 0 "$BIN" run "$rt_dir/sum.hlo" --replicas 3
has "on 3 devices (3 replicas x 1 partition)"; has "= 3"; has "the same on all 3 devices"
expect 0 "$BIN" run "$rt_dir/sum.hlo" --replicas 2 --partitions 2 --chip v5litepod-4
has "2 replicas x 2 partitions"; has "links of v5litepod-4"

# device 1 fails; the others are released and the error names it
cat > "$rt_dir/fail.hlo" <<'EOF'
HloModule fail, replica_count=2
add { a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT r = f32[] add(a, b) }
okb { p = f32[2] parameter(0)
 ROOT r = f32[2] copy(p) }
badb { p = f32[2] parameter(0)
 ROOT r = f32[2] custom-call(p), custom_call_target="NoSuchTarget" }
ENTRY e {
 p = f32[2] parameter(0)
 r = u32[] replica-id()
 one = u32[] constant(1)
 is1 = pred[] compare(r, one), direction=EQ
 c = f32[2] conditional(is1, p, p), true_computation=badb, false_computation=okb
 ROOT ar = f32[2] all-reduce(c), replica_groups={}, to_apply=add
}
EOF
expect 1 "$BIN" run "$rt_dir/fail.hlo" --random-inputs
has "device 1 (replica 1, partition 0)"; has "NoSuchTarget"
rm -rf "$rt_dir"
