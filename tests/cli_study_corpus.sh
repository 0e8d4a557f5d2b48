#!/usr/bin/env bash
# cli_study_corpus.sh — scripts/study-corpus.sh's text stage on a fixture (--from-dir: no apt, no
# network, no root): HTML, POD, info, man and plain-text documents are cleaned (navigation, code and
# tables of numbers dropped), an exact duplicate is dropped, documents are split whole and in the
# same way on every run, and the token dataset's splits are train.txt and val.txt exactly.
. "$(dirname "$0")/cli_lib.sh" "$@"
SCRIPT=$(cd "$(dirname "$0")/.." && pwd)/scripts/study-corpus.sh
export DIFFTRANS=$DT

F=$S/fixture
mkdir -p "$F/html" "$F/notes"
cat >"$F/html/page.html" <<'EOF'
<html><head><title>Head title never shown</title><style>body { color: red; }</style></head>
<body><div class="related" role="navigation"><a href="x">Navigation bar text</a></div>
<div role="main"><h1>Cooking with Rivers</h1>
<p>The river runs past the old mill, where the miller once ground wheat for the whole valley.
He kept a small garden beside the water and grew beans, onions and tall sunflowers every summer.</p>
<div class="highlight"><pre>for (int i = 0; i &lt; n; i++) { total += values[i]; }</pre></div>
<table><tr><td>17</td><td>42</td></tr><tr><td>Few cell words</td><td>3.5</td></tr>
<tr><td>A cell that holds a long description of the weather stays in the text.</td></tr></table>
<p>In the evening the villagers gathered by the bridge to tell stories about floods and harvests.</p>
</div><div class="footer">Copyright footer text</div><div id="ft">Footer by id</div></body></html>
EOF
cat >"$F/manual.pod" <<'EOF'
=head1 NAME

manual - a fixture written in POD

=head1 DESCRIPTION

This manual explains how a lighthouse keeper spends the long winter nights,
trimming the wick and writing letters to a sister who lives in the city.

    my $verbatim = "code that must not reach the corpus";
    print $verbatim;

Each morning he records the weather in a thick book with a green cover.

=cut
EOF
printf '%s\n' "This is fixture.info, produced by hand." "" \
    $'\x1f' "File: fixture.info,  Node: Top,  Next: Seasons,  Up: (dir)" "" "Fixture" "*******" "" \
    "   The orchard behind the house has apple trees that are older than anyone in the family" \
    "remembers, and every autumn the children climb them to shake the branches. Their mother" \
    "makes cider in the shed and sells the jars at the crossroads to travellers on the way north." "" \
    "* Menu:" "" "* Seasons::     What the orchard does all year." "" \
    $'\x1f' "File: fixture.info,  Node: Seasons,  Prev: Top,  Up: Top" "" "1 Seasons" "*********" "" \
    "   In spring the blossoms cover the grass like snow, and bees come from the hives on the hill" \
    "to visit every flower; see *note Top:: for the trees themselves. In summer the fruit swells" \
    "slowly in the heat, and in winter the branches stand bare against the grey sky." >"$F/fixture.info"
cat >"$F/tool.1" <<'EOF'
.TH TOOL 1 "2024" "fixture" "Fixture Manual"
.SH NAME
tool \- a fixture manual page
.SH DESCRIPTION
.B tool
reads a letter from the post office and reads it aloud to everyone sitting at the kitchen table,
slowly, so that the youngest can follow every word of the story.
.SH NOTES
The letters are kept in a wooden box under the stairs, tied with ribbon by the year they came.
EOF
# thirty plain-text documents with two paragraphs each, one of them twice (dedup), one that is
# mostly numbers (dropped) and one in another script (not English: dropped)
for i in $(seq 1 30); do
    {
        echo "Note number $i tells of a walk along the coast, where the wind bends the grass and the"
        echo "gulls call over the harbour while fishing boats come home with their catch."
        echo
        echo "On day $i the walker met a shepherd who spoke about sheep, dogs and the price of wool at"
        echo "the market in town, and about the long road over the hills to get there."
    } >"$F/notes/note$i.txt"
done
cp "$F/notes/note7.txt" "$F/notes/zz-copy-of-note7.txt"
printf '%s\n' "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20" "3.14 2.71 1.41 1.73 0.57 4.66 2.50 9.81" >"$F/notes/numbers.txt"
printf '%s\n' "Это русский текст о реке, мельнице и деревне, который не должен попасть в английский корпус, потому что он на другом языке." >"$F/notes/russian.txt"

# the fixture's corpus: RUN [more options] OUT
RUN=(bash "$SCRIPT" --from-dir "$F" --val-permille 200 --vocab-size 300 --threads 2)

expect_ok "--help" bash "$SCRIPT" --help
out_has "--help lists the packages and why" "$S/last.out" "linux-doc-6.1" "python3.11-doc" "--from-dir"
expect_fail "an unknown option" "unknown option" bash "$SCRIPT" --bogus "$S/x"
expect_fail "--val-permille 0" "val-permille" bash "$SCRIPT" --from-dir "$F" --val-permille 0 "$S/x"

expect_ok "the corpus from the fixture" "${RUN[@]}" "$S/a"
A=$S/a
for f in train.txt val.txt MANIFEST.json tokens/dataset.json tokenizer/tokenizer.json; do
    check "$f written" test -s "$A/$f"
done
# a second build elsewhere, and a rebuild in place, give the same bytes
expect_ok "the same corpus again, elsewhere" "${RUN[@]}" "$S/b"
expect_ok "a rebuild in place" "${RUN[@]}" "$S/a"
out_has "the rebuild reuses the tokenizer and the dataset" "$S/last.out" "tokenizer reused" "token dataset reused"
for f in train.txt val.txt tokens/train-00000.tok tokens/val-00000.tok tokenizer/tokenizer.json; do
    check "$f is the same on every build" cmp "$A/$f" "$S/b/$f"
done

# documents: split on blank lines; none in both splits, each text once
doc_list() { awk 'BEGIN { RS = "" } { gsub(/\n/, "\\n"); print }' "$1" | LC_ALL=C sort; }
doc_list "$A/train.txt" >"$S/train.docs"
doc_list "$A/val.txt" >"$S/val.docs"
check "some documents are held out" test -s "$S/val.docs"
check "most documents are trained on" test "$(grep -c 'Note number' "$S/train.docs")" -gt "$(grep -c 'Note number' "$S/val.docs")"
check "no document is in both splits" test -z "$(LC_ALL=C comm -12 "$S/train.docs" "$S/val.docs")"
check "the duplicate document is kept once" test "$(cat "$A/train.txt" "$A/val.txt" | grep -c '^Note number 7 ')" -eq 1
check "the duplicate counted as dropped" grep -q '"duplicates_dropped": 1' "$A/MANIFEST.json"
check "35 documents (30 notes, the HTML, POD and man pages, 2 info nodes; the copy, numbers, Russian dropped)" \
    test "$(cat "$S/train.docs" "$S/val.docs" | wc -l)" -eq 35
check "documents separated by one blank line, none inside one" \
    test "$(grep -c '^$' "$A/train.txt")" -eq $(($(wc -l <"$S/train.docs") - 1))

# cleaning
ALL=$S/all.txt
cat "$A/train.txt" "$A/val.txt" >"$ALL"
out_has "HTML prose, the long cell, POD, man page and info text kept" "$ALL" "the miller once ground wheat" \
    "long description of the weather" "lighthouse keeper spends" "reads a letter from the post office" \
    "blossoms cover the grass" "apple trees that are older"
check "an HTML paragraph is one line" grep -q "ground wheat for the whole valley. He kept a small garden" "$ALL"
for gone in "Head title" "color: red" "Navigation bar" "total +=" "Few cell words" "Copyright footer" "Footer by id" \
    "code that must not" "Menu:" "1 2 3 4 5" "русский" "File: fixture.info"; do
    check "'$gone' left out" bash -c '! grep -qF -- "$1" "$2"' _ "$gone" "$ALL"
done
check "the info cross-reference keeps its words" grep -q "see Top for the trees" "$ALL"
check "the text is valid UTF-8" iconv -f UTF-8 -t UTF-8 "$ALL" -o /dev/null

# the token dataset's splits are the two files: each tokenised alone (all of it training) gives
# the same shard, byte for byte
for split in train val; do
    expect_ok "$split.txt alone" "$DT" tokenize --tokenizer "$A/tokenizer" --data "$A/$split.txt" \
        --val-fraction 0 --out "$S/alone_$split" --documents paragraph --quiet
    check "the dataset's $split split is $split.txt" cmp "$A/tokens/$split-00000.tok" "$S/alone_$split/train-00000.tok"
done
check "the two splits differ (the comparison above could fail)" \
    bash -c '! cmp -s "$1" "$2"' _ "$A/tokens/train-00000.tok" "$A/tokens/val-00000.tok"
check "the dataset names val.txt as its validation file" grep -q '"val_files"' "$A/tokens/dataset.json"
expect_fail "tokenize --val with --val-fraction" "val-fraction" "$DT" tokenize --tokenizer "$A/tokenizer" \
    --data "$A/train.txt" --val "$A/val.txt" --val-fraction 0.1 --out "$S/both"
out_has "the manifest gives the files' hashes and token counts" "$A/MANIFEST.json" '"sha256"' '"bytes_per_token"' \
    "$(sha256sum "$A/train.txt" | cut -d' ' -f1)"
# a held-out share set by name: another permille moves documents between the splits
expect_ok "--val-permille 500" "${RUN[@]}" --val-permille 500 --no-tokens "$S/c"
check "a larger share holds out more" test "$(wc -c <"$S/c/val.txt")" -gt "$(wc -c <"$A/val.txt")"

finish cli_study_corpus
