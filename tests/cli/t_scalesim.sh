# t_scalesim.sh — `tpusim scalesim` (sourced by tests/cli/run.sh: $BIN, expect, ok, bad).
ss_tmp=$(mktemp -d /tmp/tpusim-ss-cli-XXXXXX)
ss_gold=tests/golden/scalesim

expect 0 "$BIN" scalesim --help
expect 2 "$BIN" scalesim                                   # -c is required
expect 2 "$BIN" scalesim -c "$ss_gold/calc_os_gemm/config.cfg" -i matrix
expect 2 "$BIN" scalesim --frobnicate
expect 2 "$BIN" scalesim -c /nonexistent.cfg -t "$ss_gold/calc_os_gemm/topology.csv"

# SCALE-Sim's own command line, reports identical to SCALE-Sim 3.0.0's
for ss_case in calc_ws_conv user_is_gemm; do
    ss_mode=$(cat "$ss_gold/$ss_case/mode")
    expect 0 "$BIN" scalesim -c "$ss_gold/$ss_case/config.cfg" -t "$ss_gold/$ss_case/topology.csv" -i "$ss_mode" \
        -p "$ss_tmp/out" -s N
    for ss_r in COMPUTE_REPORT BANDWIDTH_REPORT DETAILED_ACCESS_REPORT; do
        if cmp -s "$ss_gold/$ss_case/$ss_r.csv" "$ss_tmp/out/$ss_case/$ss_r.csv"; then ok; else bad "scalesim $ss_case $ss_r.csv differs"; fi
    done
done

# every corpus topology with a corpus config produces the three reports
ss_corpus=../shared/corpus/scalesim
if [ -d "$ss_corpus" ]; then
    for ss_t in alexnet Resnet18 Resnet50 NCF gpt2 test_mnk_input; do
        case $ss_t in NCF|gpt2|test_mnk_input) ss_m=gemm ;; *) ss_m=conv ;; esac
        expect 0 "$BIN" scalesim -q -c "$ss_corpus/configs/scale.cfg" -t "$ss_corpus/topologies/$ss_t.csv" -i "$ss_m" \
            -p "$ss_tmp/corpus/$ss_t"
        if [ -s "$ss_tmp/corpus/$ss_t/scale_example_run_32x32_ws/DETAILED_ACCESS_REPORT.csv" ]; then ok; else bad "no reports for $ss_t"; fi
    done
fi

# malformed input: exit 2 and a message naming file:line
printf '[general]\nrun_name = x\n[architecture_presets]\nArrayHeight: tall\n[run_presets]\nInterfaceBandwidth: CALC\n' > "$ss_tmp/bad.cfg"
expect 2 "$BIN" scalesim -c "$ss_tmp/bad.cfg" -t "$ss_gold/calc_os_gemm/topology.csv" -i gemm
if grep -q "bad.cfg:4: ArrayHeight = 'tall' is not an integer" "$CLI_OUT"; then ok; else bad "bad.cfg message"; fi
printf 'Layer, M, N, K,\ng1, 8, 8, 8,\ng2, 8, eight, 8,\n' > "$ss_tmp/bad.csv"
expect 2 "$BIN" scalesim -c "$ss_gold/calc_os_gemm/config.cfg" -t "$ss_tmp/bad.csv" -i gemm -p "$ss_tmp/out"
if grep -q "bad.csv:3: column 3 (N) = 'eight' is not an integer" "$CLI_OUT"; then ok; else bad "bad.csv message"; fi
expect 2 "$BIN" scalesim -c "$ss_gold/calc_os_gemm/config.cfg" -t "$ss_gold/calc_os_gemm/topology.csv" -i conv -p "$ss_tmp/out"
if grep -q "needs -i gemm" "$CLI_OUT"; then ok; else bad "gemm hint"; fi

rm -rf "$ss_tmp"
