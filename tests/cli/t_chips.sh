# tpusim chips: the generation table, one chip or slice, chip files, and clear errors (exit 2).
# Sourced by tests/cli/run.sh ($BIN, expect, ok, bad).
out=$CLI_OUT
has() { if grep -q -- "$1" "$out"; then ok; else bad "output lacks '$1'"; sed 's/^/    /' "$out" | head -20 >&2; fi; }

expect 0 "$BIN" chips
has "v5litepod-N (chips)"; has "tpu7x-N (cores)"; has "2307"
expect 0 "$BIN" chips --help
has "usage: tpusim chips"
expect 0 "$BIN" chips --json
if command -v python3 >/dev/null; then
  if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d)==7 and d[0]["name"]=="v2"' "$out"; then ok; else bad "chips --json is not the 7-entry array"; fi
fi
expect 0 "$BIN" chips v3-32
has "v3-32: 16 v3 chips, 32 TensorCores"; has "15.48 GiB of 16 GiB per device"; has "topology 4x4"
expect 0 "$BIN" chips v4-64
has "32 v4 chips, 64 TensorCores"; has "topology 2x4x4"
expect 0 "$BIN" chips v5e-16
has "v5litepod-16: 16 v5e chips"; has "4 hosts"
expect 0 "$BIN" chips --json tpu7x-8 v6e
if command -v python3 >/dev/null; then
  if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d[0]["chips"]==4 and d[1]["name"]=="v6e"' "$out"; then ok; else bad "chips --json tpu7x-8 v6e"; fi
fi
expect 0 "$BIN" chips examples/chips/v5e-2x-hbm.json
has "v5e-2x-hbm:4x4"; has "31.75 GiB of 32 GiB per device"
expect 2 "$BIN" chips v3-12
has "v3 slices come in 8, 32, 64, 128, 256, 512, 1024 and 2048 cores"
expect 2 "$BIN" chips v5litepod-3
has "v5e slices come in 1, 4, 8"
expect 2 "$BIN" chips v9
has "unknown chip 'v9'"
expect 2 "$BIN" chips /no/such/chip.json
has "cannot open"
tmpchip=$(mktemp /tmp/tpusim-chip-XXXXXX.json)
printf '{"name": "x", "base": "v5e", "hbm_gb": 32}\n' > "$tmpchip"
expect 2 "$BIN" chips "$tmpchip"
has "unknown key 'hbm_gb' (did you mean 'hbm_gib'?"
printf '{"name": "x",\n "base": "v5e",\n "mxu_rows": }\n' > "$tmpchip"
expect 2 "$BIN" chips "$tmpchip"
has ":3:"
rm -f "$tmpchip"
expect 2 "$BIN" chips --bogus
