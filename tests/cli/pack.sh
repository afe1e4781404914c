# Document boundaries from the command line: `weft prepare` writes each token file's document
# index (its header and the count it reports).
source "$(dirname "$0")/lib.sh"
prepare_data

# The index header: "weftdocs", version 1, the tokens of its file, the documents.
idx_header() { od -An -t d8 -j 8 -N 24 "$1" | xargs; }
[ "$(head -c 8 data/tinyshakespeare_train.idx)" = weftdocs ] && ok "train index written" ||
  bad "no train index"
read -r version tokens docs <<<"$(idx_header data/tinyshakespeare_train.idx)"
[ "$version $tokens" = "1 305260" ] && [ "$docs" -gt 6000 ] &&
  ok "train index: version 1, 305260 tokens, $docs documents" || bad "index header: $version $tokens $docs"

finish
