#!/usr/bin/env bash
# `difftx maps` on the needle DIFF and standard models and the Table 6 DIFF V2 model, from another
# working folder, on a text file and prompts, all or chosen layers and heads (the layout, every row,
# λ per token for DIFF V2), `attn` on such a file; refusals (both or neither of `--text`/`--prompt`,
# no output, a layer the model lacks, a repeated head, the output over the checkpoint, a text past
# 2,048 tokens with its cost); `difftx view` on those files and a needle episode, its refusals; then
# in headless Chromium, through the page's own functions, each map's value at four cells against the
# HDF5 file (within the stated 8-bit step; one cell above 0.05 so zeros cannot pass), four heads
# drawing four different views named with their λ, the text lines, no resource and no request in the
# browser's network log (which does show the request of a page that makes one), token text holding
# `</script><script>` shown as text, a DINT page's signed A2 - G read back below zero, and two
# screenshots. The noise metrics beside each head: on a hand-made file (write_fixture hand_maps)
# sink -0.25, negative mass 0.75, answer 1.75, noise -0.25 (over sum |w| 0.7 and -0.1) and entropy
# 0.9404480 as worked out by hand; none negative for softmax; the page showing what its data holds. It uses the models
# test_needle.sh and test_table6.sh trained (run.sh runs them first).
set -u
cd "$(dirname "$0")/.."
bin=$PWD/${BUILD:-build}/difftx
work=$PWD/build/test_view
rm -rf "$work" && mkdir -p "$work"
source tests/harness.sh
needle=$PWD/build/test_needle_sh/results/needle/smoke
diff_ckpt=$needle/diff/seed2024/checkpoint.h5 standard_ckpt=$needle/standard/seed2024/checkpoint.h5
v2_ckpt=$PWD/build/test_table6/results/table6/smoke/diff2/seed1000/checkpoint.h5
for f in "$diff_ckpt" "$standard_ckpt" "$v2_ckpt" "$needle/maps_diff.h5"; do
    [ -s "$f" ] || { echo "missing $f: run tests/test_needle.sh and tests/test_table6.sh first"; echo "0 passed, 1 failed"; exit 1; }
done

# a text whose tokens hold what must stay text: markup, a script end, quotes, backslashes, UTF-8
printf '%s\n' 'The special magic harbour number is: 4242. <b>bold</b> </script><script>document.title="PWNED"</script>' \
    "It's \"quoted\" \\ and café, naïve — the magic number is 4242." > "$work/text.txt"

# 1. difftx maps on every variant, from another working folder (the tokenizer beside the checkpoint)
(cd /tmp && "$bin" maps "$diff_ckpt" --text "$work/text.txt" -o "$work/diff.h5") > "$work/maps_diff.log" 2>&1
expect "maps: a DIFF needle model on a text file, from another folder" test -s "$work/diff.h5"
T=$(h5ls "$work/diff.h5/sample_000/tokens" | sed -n 's/.*{\([0-9]*\)}.*/\1/p')
expect "maps: states its tokens and size" grep -qE "^.*: $T tokens \(BOS and the text\), 1 layer\(s\) x 4 head\(s\) x 3 map\(s\) of $T x $T" "$work/maps_diff.log"
expect "maps: every row of A1, A2, the combined map and λ for each head" \
    test "$(h5ls -r "$work/diff.h5" | grep -cE "head_0[0-3]/(A1|A2|map) +Dataset \{$T, $T\}|head_0[0-3]/lambda +Dataset \{$T\}")" = 16
expect "maps: the rows are every position, and no needles" bash -c "h5ls '$work/diff.h5/sample_000/rows' | grep -q '{$T}' && h5ls '$work/diff.h5/sample_000/needles' | grep -q '{0, 2}'"
"$bin" maps "$standard_ckpt" --prompt "The special magic number is 17. What is the number?" --heads 1,6 -o "$work/standard.h5" > /dev/null 2>&1
expect "maps: a standard model, two chosen heads, one map each" \
    test "$(h5ls -r "$work/standard.h5" | grep -cE 'head_0[16]/map ')/$(h5ls -r "$work/standard.h5" | grep -cE 'head_[0-9]+ +Group')" = "2/2"
"$bin" maps "$v2_ckpt" --prompt "Once upon a time there was a harbour." --layers 1 -o "$work/v2.h5" > /dev/null 2>&1
expect "maps: DIFF V2, layer 1 only, λ per token" bash -c "h5ls -r '$work/v2.h5' | grep -q 'layer_01/head_03/lambda' && ! h5ls -r '$work/v2.h5' | grep -q layer_00 &&
    test \"\$(h5dump -d /sample_000/layer_01/head_00/lambda '$work/v2.h5' | grep -oE '[0-9]\.[0-9]+' | sort -u | wc -l)\" -gt 1"
expect_fail "attn: a head the file did not save" "--layer 0 --head 0: .* holds no maps of that head in sample_000" "$bin" attn "$work/v2.h5" --sample 0 --layer 0 --head 0
expect "attn draws a text's maps file too" "$bin" attn "$work/v2.h5" --sample 0 --layer 1 --head 2 --out "$work/v2_attn.png"
expect_fail "maps: --text and --prompt together" "exactly one of --text FILE and --prompt TEXT" "$bin" maps "$diff_ckpt" --text "$work/text.txt" --prompt x -o "$work/x.h5"
expect_fail "maps: no output" "maps needs -o OUT.h5" "$bin" maps "$diff_ckpt" --prompt x
expect_fail "maps: a layer the model lacks" "option --layers: '3' is not a list of numbers in 0..0" "$bin" maps "$diff_ckpt" --prompt x --layers 3 -o "$work/x.h5"
expect_fail "maps: a head listed twice" "option --heads: 1 is listed twice" "$bin" maps "$diff_ckpt" --prompt x --heads 1,1 -o "$work/x.h5"
expect_fail "maps: the output over the checkpoint" "output .* is the input" "$bin" maps "$diff_ckpt" --prompt x -o "$diff_ckpt"
for i in $(seq 1 400); do printf 'Record %d of the harbour log, with more words than before. ' "$i"; done > "$work/long.txt"
expect_fail "maps: a text past 2,048 tokens, with what it would cost" "long.txt: [0-9]+ tokens; maps take T x T floats per map and head \([0-9]+ MiB .*at most 2048 tokens" \
    "$bin" maps "$diff_ckpt" --text "$work/long.txt" -o "$work/x.h5"
printf 'The harbour log\0\1\2 and what follows a zero byte' > "$work/binary.txt"
expect_fail "maps: a --text file with a zero byte is refused, not cut at it" "--text '.*binary.txt' looks binary \(a zero byte at offset 15\)" \
    "$bin" maps "$diff_ckpt" --text "$work/binary.txt" -o "$work/x.h5"
expect "maps: refusals write nothing" test ! -e "$work/x.h5"

# 2. difftx view: one page per file, the template filled in; token text cannot open markup
for f in diff standard v2; do "$bin" view "$work/$f.h5" -o "$work/$f.html" > "$work/view_$f.log" 2>&1; done
"$bin" view "$needle/maps_diff.h5" --sample 2 -o "$work/needle.html" > "$work/view_needle.log" 2>&1
expect "view: a page per file" test -s "$work/diff.html" -a -s "$work/standard.html" -a -s "$work/v2.html" -a -s "$work/needle.html"
expect "view: says what it wrote" grep -qE "^wrote .*diff.html: sample_000, $T tokens, 4 heads, [0-9.]+ MiB \(maps [0-9.]+ MiB as 8 bits, [0-9.]+ MiB deflated\)" "$work/view_diff.log"
expect "view: the page holds the template's two script elements only" test "$(grep -o '<script' "$work/diff.html" | wc -l)" = 2
expect "view: no address to fetch anything from" bash -c "! grep -qiE '(src|href)=\"?(https?:)?//' '$work/diff.html'"
expect_fail "view: a sample the file lacks" "--sample 9: .* has no group 'sample_009'" "$bin" view "$work/diff.h5" --sample 9 -o "$work/y.html"
expect_fail "view: not a maps file" "not an attention-maps file" "$bin" view "$diff_ckpt" -o "$work/y.html"
expect_fail "view: the output over its input" "output .* is the input" "$bin" view "$work/diff.h5" -o "$work/diff.h5"
# hostile maps files (a copy of diff.h5 damaged in place) are refused by name and dataset, at
# once, writing nothing
fixture=${BUILD:-build}/write_fixture
tampered() { cp "$work/diff.h5" "$work/bad_$1.h5" && "$fixture" tamper "$work/bad_$1.h5" "$1"; }
for how in n_layer n_head inf nan_lambda no_tokens huge_tokens; do tampered $how; done
expect_fail "view: a file claiming 2^31 - 1 layers is refused at once" "n_layer 2147483647 and n_head 4 must lie in 1..256" \
    timeout 10 "$bin" view "$work/bad_n_layer.h5" -o "$work/y.html"
expect_fail "view: and one claiming 2^31 - 1 heads" "n_layer 1 and n_head 2147483647 must lie in 1..256" \
    timeout 10 "$bin" view "$work/bad_n_head.h5" -o "$work/y.html"
# W15: a size a file declares is checked against what it stores before anything is allocated
expect_fail "view: a tokens dataset declaring 2^31 values it never stored is refused at once" \
    "dataset 'sample_000/tokens' declares 8589934592 bytes of values but stores 0" timeout 10 "$bin" view "$work/bad_huge_tokens.h5" -o "$work/y.html"
expect_fail "attn: the same, at once" "dataset 'sample_000/tokens' declares 8589934592 bytes" \
    timeout 10 "$bin" attn "$work/bad_huge_tokens.h5" --sample 0 --layer 0 --head 0 --out "$work/y.png"
expect_fail "view: +inf in A1" "sample_000/layer_00/head_00/A1 holds inf; softmax maps lie in \[0, 1\]" "$bin" view "$work/bad_inf.h5" -o "$work/y.html"
expect_fail "view: a NaN λ" "sample_000/layer_00/head_00/lambda holds nan at row 0; λ is finite" "$bin" view "$work/bad_nan_lambda.h5" -o "$work/y.html"
expect_fail "view: a sample of no tokens" "sample_000 holds no tokens" "$bin" view "$work/bad_no_tokens.h5" -o "$work/y.html"
# W5: a maps file whose data would come from another file (here a stand-in for /etc/shadow) is
# refused by view and attn, naming the dataset, and nothing of that file reaches a page
printf 'root:*:SECRET-LINE:0:99999:7:::\n%.0s' $(seq 200) > "$work/secret.txt"
redirected() {  # HOW DATASET: a copy of diff.h5 with DATASET taken from elsewhere
    cp "$work/diff.h5" "$work/redirect_$1.h5"
    local source="$work/source_$1.h5"
    [ "$1" = external ] && source="$work/secret.txt"
    "$fixture" redirect "$work/redirect_$1.h5" "$1" "$2" "$source"
}
for how in external link virtual; do
    redirected $how sample_000/tokens
    what=$(case $how in external) echo "dataset 'sample_000/tokens' stores its data in other files \(external storage\)" ;;
           link) echo "'sample_000/tokens' is a link into another file \(an external link\)" ;;
           virtual) echo "dataset 'sample_000/tokens' is a virtual dataset \(its data mapped from other datasets\)" ;; esac)
    expect_fail "view: a maps file whose tokens come from another file ($how) is refused" "$what: refused" \
        "$bin" view "$work/redirect_$how.h5" -o "$work/y.html"
    expect_fail "attn: the same file ($how)" "$what: refused" "$bin" attn "$work/redirect_$how.h5" --sample 0 --layer 0 --head 0 --out "$work/y.png"
done
cp "$work/diff.h5" "$work/redirect_maps.h5" && "$fixture" redirect "$work/redirect_maps.h5" external sample_000/layer_00/head_00/A1 "$work/secret.txt"
expect_fail "view: a head's map stored in another file is refused" "dataset 'sample_000/layer_00/head_00/A1' stores its data in other files" \
    "$bin" view "$work/redirect_maps.h5" -o "$work/y.html"
expect "view: refusals write nothing" test ! -e "$work/y.html" -a ! -e "$work/y.html.tmp" -a ! -e "$work/y.png"
# the noise metrics beside each head, on a file whose answer is known by hand (write_fixture.c's
# hand_maps: the question's row w = (-0.25, -0.25, 1.75, -0.25))
"$fixture" hand_maps "$work/hand.h5" && "$bin" view "$work/hand.h5" -o "$work/hand.html" > /dev/null
metric() { grep -o '"metrics":{[^}]*}' "$1" | sed -n "${3:-1}p" | grep -o "\"$2\":[-0-9.e]*" | cut -d: -f2; }
near() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && (a - b) ^ 2 < 1e-12) }'; }
# valid maps a page must hold: λ exactly 1 in a row (DIFF V2's sigmoid saturates there in
# float32) has no normalised shares, so that row is left out of the head's metrics; a combined map
# exactly zero (A2 = A1, λ 1 everywhere) leaves the head without metrics
heads_with_metrics() { grep -o '"metrics":{' "$1" | wc -l; }
for how in lambda_one_first zero_map; do
    tampered $how
    "$bin" view "$work/bad_$how.h5" -o "$work/$how.html" > "$work/view_$how.log" 2>&1
    expect "view: maps with $how are shown (exit $?)" test -s "$work/$how.html"
done
expect "view: a row whose λ is 1 is left out of its head's metrics ($((T - 1)) of $T rows)" test "$(metric "$work/lambda_one_first.html" rows)" = $((T - 1))
expect "view: a head whose combined map is exactly zero has no metrics; the others keep theirs" \
    test "$(heads_with_metrics "$work/zero_map.html")" = $(( $(heads_with_metrics "$work/diff.html") - 1 ))
expect "view metrics by hand: the question's 1 row" test "$(metric "$work/hand.html" rows)" = 1
expect "view metrics by hand: sink -0.25, negative mass 0.75" bash -c "$(declare -f near); near '$(metric "$work/hand.html" sink)' -0.25 && near '$(metric "$work/hand.html" negative)' 0.75"
expect "view metrics by hand: answer 1.75, noise -0.25" bash -c "$(declare -f near); near '$(metric "$work/hand.html" answer)' 1.75 && near '$(metric "$work/hand.html" noise)' -0.25"
expect "view metrics by hand: over sum |w| = 2.5, answer 0.7, noise -0.1" bash -c "$(declare -f near); near '$(metric "$work/hand.html" answer_abs)' 0.7 && near '$(metric "$work/hand.html" noise_abs)' -0.1"
expect "view metrics by hand: entropy -(3 x 0.1 ln 0.1 + 0.7 ln 0.7)" bash -c "$(declare -f near); near '$(metric "$work/hand.html" entropy)' \
    \$(awk 'BEGIN { print -(3 * 0.1 * log(0.1) + 0.7 * log(0.7)) }')"
expect "view metrics: a text's over all its $T rows, no answer or noise share" \
    bash -c "test '$(metric "$work/diff.html" rows)' = $T && ! grep -o '\"metrics\":{[^}]*}' '$work/diff.html' | grep -q answer"
expect "view metrics: softmax maps have no negative mass" test "$(grep -o '"negative":[-0-9.e]*' "$work/standard.html" | sort -u)" = '"negative":0.0'
expect "view metrics: some DIFF head puts weight below zero" \
    bash -c "grep -o '\"negative\":[-0-9.e]*' '$work/diff.html' | cut -d: -f2 | awk '\$1 > 0 { n++ } END { exit !n }'"

# 3. the pages in a real browser
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ] || ! command -v jq > /dev/null; then
    echo "skipped: the browser checks: they need Chromium and jq (make test installs them when run as root; otherwise: sudo apt-get install -y chromium jq)"
    summary
    exit
fi
# the browser with a profile, home and cache inside the test's folder (Chromium writes crash
# settings and dconf under $HOME even with --user-data-dir) and its background requests (updates,
# sync, safe browsing, metrics) off, every host name unresolvable besides
browser_home=$work/browser
mkdir -p "$browser_home/home"
since_browser=$work/before_browser
touch "$since_browser"
run_browser() {
    HOME=$browser_home/home XDG_CONFIG_HOME=$browser_home/home/.config XDG_CACHE_HOME=$browser_home/home/.cache \
        timeout 120 "$browser" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
        --user-data-dir="$browser_home/profile" --disk-cache-dir="$browser_home/cache" --disable-background-networking \
        --disable-component-update --disable-sync --disable-default-apps --no-default-browser-check --disable-breakpad \
        --disable-domain-reliability --host-resolver-rules="MAP * ~NOTFOUND" --virtual-time-budget=20000 "$@"
}
browse() {  # browse FILE PROBE_JSON [chromium flags...]: the page's #probe-out after it ran the probe
    local file=$1 probe=$2
    shift 2
    run_browser "$@" --dump-dom "file://$file#probe=$(jq -rn --arg p "$probe" '$p | @uri')" 2>/dev/null |
        sed -n 's/.*<pre id="probe-out">\([^<]*\)<\/pre>.*/\1/p' | sed 's/&gt;/>/g; s/&lt;/</g; s/&quot;/"/g; s/&amp;/\&/g'
}
h5val() { h5dump -d "$2" -s "$3" -c "$4" "$1" | sed -n 's/^ *([0-9,]*): *\([-0-9.e]*\).*/\1/p' | head -1; }  # FILE DATASET START COUNT

# cells (head index, query, key) of the DIFF text page: each map's value as the page shows it
# on hover, against the file; a value is 8 bits of its map's largest entry, so within half a
# step (at most 1/510) plus the 4 shown decimals, and A1 - λ A2 within (1 + λ) of that
out=$(browse "$work/diff.html" "{\"cells\": [[0, 1, 0], [1, 2, 2], [2, $((T / 2)), 0], [3, $((T - 1)), $((T - 2))]], \"select\": [0, 1, 2, 3]}" \
    --log-net-log="$work/net.json")
echo "$out" > "$work/probe_diff.json"
expect "the page ran its probe" test -n "$out"
n=0 big=0
for cell in "0 1 0" "1 2 2" "2 $((T / 2)) 0" "3 $((T - 1)) $((T - 2))"; do
    set -- $cell
    shown=$(jq -r ".cells[$n]" <<<"$out")
    h=$(printf 'layer_00/head_%02d' "$1")
    a1=$(h5val "$work/diff.h5" "/sample_000/$h/A1" "$2,$3" "1,1") a2=$(h5val "$work/diff.h5" "/sample_000/$h/A2" "$2,$3" "1,1")
    map=$(h5val "$work/diff.h5" "/sample_000/$h/map" "$2,$3" "1,1") lam=$(h5val "$work/diff.h5" "/sample_000/$h/lambda" "$2" "1")
    read -r s1 s2 s3 sl <<<"$(sed -n 's/^A1 \([-0-9.]*\)   A2 \([-0-9.]*\)   A1 − λ·A2 \([-0-9.]*\)   λ \([-0-9.]*\)$/\1 \2 \3 \4/p' <<<"$shown")"
    expect "cell $n (head $1, query $2, key $3): the page shows the file's A1 $a1, A2 $a2, A1 - λ A2 $map, λ $lam: '$shown'" \
        awk -v s1="${s1:-x}" -v s2="${s2:-x}" -v s3="${s3:-x}" -v sl="${sl:-x}" -v a1="$a1" -v a2="$a2" -v m="$map" -v l="$lam" 'BEGIN {
            t = 1 / 510 + 5e-5; d = (s1 - a1) ^ 2 < t * t && (s2 - a2) ^ 2 < t * t && (s3 - m) ^ 2 < ((1 + l) * t) ^ 2 && (sl - l) ^ 2 < 1e-8;
            exit !(s1 != "x" && d) }'
    expect "cell $n names its query and key tokens and positions" grep -qE "^query $2 \".*\"  ->  key $3 \".*\"$" <<<"$(head -1 <<<"$shown")"
    big=$(awk -v a="$a1" -v b="$big" 'BEGIN { print (a > 0.05 ? 1 : b) }')
    n=$((n + 1))
done
expect "a probed cell carries real weight (A1 above 0.05), so the comparison is not of zeros" test "$big" = 1
expect "each selected head draws its own view" test "$(jq -r '.digests | unique | length' <<<"$out")" = 4
expect "the view names the selected layer and head, with the layer's λ" \
    test "$(jq -r '.selections[3]' <<<"$out" | grep -cE '^layer 0, head 3   λ = [0-9.]+ \(the layer.s\)$')" = 1
expect "three text lines (A1, A2, A1 - λ·A2) for the selected query" test "$(jq -r '.text_lines' <<<"$out")" = 3
expect "the page loaded no resource" test "$(jq -r '.resources' <<<"$out")" = 0
# the browser's network log holds every request; a page's carry the page's origin as initiator
# ("null" from disk), the browser's own (updates, accounts) "not an origin"
page_requests() { jq -c '[.events[] | select(.params.initiator? != null and .params.initiator != "not an origin") | .params.url]' "$1"; }
expect "the network log shows no request from the page" test "$(page_requests "$work/net.json")" = "[]"
# ... and it would show one: a page that loads an image from the network is seen in it
printf '<!DOCTYPE html><img src="http://127.0.0.1:9/probe.png"><pre id="probe-out">{}</pre>' > "$work/fetching.html"
browse "$work/fetching.html" "{}" --log-net-log="$work/net_fetching.json" > /dev/null
expect "the network check sees a page's request when there is one" test "$(page_requests "$work/net_fetching.json")" = '["http://127.0.0.1:9/probe.png"]'
expect "the token texts show the markup as text" test "$(jq -r '.text' <<<"$out" | grep -cF '<b>bold</b> </script><script>document.title="PWNED"</script>')" = 1
expect "and none of it ran (the page's title is its own)" test "$(jq -r '.title' <<<"$out")" = "difftx attention maps"

# the standard page: one map per head, no λ; the DIFF V2 page: λ per token; the needle page: its spans
out=$(browse "$work/standard.html" '{"cells": [[1, 5, 0]], "select": [0, 1]}')
a=$(h5val "$work/standard.h5" /sample_000/layer_00/head_06/map "5,0" "1,1")
shown=$(jq -r '.cells[0]' <<<"$out")
expect "standard page: the softmax map's value ($a) at head 6: '$shown'" \
    awk -v s="$(sed -n 's/^softmax \([-0-9.]*\)$/\1/p' <<<"$shown")" -v a="$a" 'BEGIN { t = 1 / 510 + 5e-5; exit !(s != "" && (s - a) ^ 2 < t * t) }'
expect "standard page: one text line, two distinct views" test "$(jq -r '.text_lines' <<<"$out")/$(jq -r '.digests | unique | length' <<<"$out")" = "1/2"
out=$(browse "$work/v2.html" '{"select": [0, 3]}')
m4=$(grep -o '"metrics":{[^}]*}' "$work/v2.html" | sed -n 4p | cut -d'{' -f2)
want=$(awk -v m="$m4" 'BEGIN { n = split(m, f, /[:,}]/); for (i = 1; i < n; i++) v[f[i]] = f[i + 1]
    printf "all %d rows: sink (BOS) %.3f · entropy %.3f nats · negative mass %.3f", v["\"rows\""], v["\"sink\""], v["\"entropy\""], v["\"negative\""] }')
expect "DIFF V2 page: the selected head's metrics as the page's data holds them ($want)" test "$(jq -r '.metrics[1]' <<<"$out")" = "$want"
expect "DIFF V2 page: λ per token" grep -qE '^layer 1, head 3   λ per token: [0-9.]+ at the query, [0-9.]+ to [0-9.]+ over the rows$' <<<"$(jq -r '.selections[1]' <<<"$out")"
out=$(browse "$work/needle.html" '{"select": [0]}')
expect "needle page opens and draws" test "$(jq -r '.digests | length' <<<"$out")" = 1
# the DINT page: A2 less the integral term, stored around byte 128, read back with its sign. Row 1's
# entries of A2 - G sum to zero, so of keys 0 and 1 one is negative (or both zero)
"$bin" maps "$needle/dint/seed2024/checkpoint.h5" --text "$work/text.txt" --heads 0 -o "$work/dint.h5" > /dev/null 2>&1
"$bin" view "$work/dint.h5" -o "$work/dint.html" > /dev/null 2>&1
out=$(browse "$work/dint.html" '{"cells": [[0, 1, 0], [0, 1, 1]], "select": [0]}')
lowest=1
for k in 0 1; do
    shown=$(jq -r ".cells[$k]" <<<"$out")
    a2=$(h5val "$work/dint.h5" /sample_000/layer_00/head_00/A2 "1,$k" "1,1") map=$(h5val "$work/dint.h5" /sample_000/layer_00/head_00/map "1,$k" "1,1")
    read -r s2 s3 <<<"$(sed -n 's/^A1 [-0-9.]*   A2 − G \([-0-9.]*\)   A1 − λ·(A2 − G) \([-0-9.]*\)   λ [-0-9.]*$/\1 \2/p' <<<"$shown")"
    expect "DINT page, query 1, key $k: A2 - G $a2 and the combined map $map as the file holds them: '$shown'" \
        awk -v s2="${s2:-x}" -v s3="${s3:-x}" -v a2="$a2" -v m="$map" 'BEGIN { t = 1 / 254 + 5e-5; exit !(s2 != "x" && (s2 - a2) ^ 2 < t * t && (s3 - m) ^ 2 < (3 * t) ^ 2) }'
    lowest=$(awk -v a="$a2" -v b="$lowest" 'BEGIN { print (a < b ? a : b) }')
done
expect "DINT page: one of those entries is below zero ($lowest), so the sign is what was read back" awk -v a="$lowest" 'BEGIN { exit !(a < -0.001) }'
# screenshots of what a user sees: the DIFF text page with a query picked, the needle episode
q=$((T - 3))
run_browser --window-size=1500,1100 --screenshot="$work/view_diff.png" "file://$work/diff.html#probe=%7B%22query%22%3A$q%7D" > /dev/null 2>&1
run_browser --window-size=1500,1100 --screenshot="$work/view_needle.png" "file://$work/needle.html" > /dev/null 2>&1
expect "screenshots saved" bash -c "head -c 4 '$work/view_diff.png' | grep -q PNG && head -c 4 '$work/view_needle.png' | grep -q PNG"
expect "the browser kept its profile in the test's folder" test -s "$browser_home/profile/Local State"
expect "and wrote nothing under the user's home" test -z "$(find "$HOME" -maxdepth 3 -newer "$since_browser" \( -path '*chromium*' -o -path '*dconf*' \) -print -quit)"
summary
