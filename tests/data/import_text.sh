#!/usr/bin/env bash
# kdp-data import-text: text files as windows of tokens (bytes and chars),
# read back with h5py; the refusals (empty, binary, not UTF-8, too short, an
# existing output) said in their first line, nothing written; kdp-data info
# lists the file.
#
#   import_text.sh TOOLS_DIR TESTS_SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
# shellcheck source=../reliability/common.sh
source "$src/reliability/common.sh"
cd "$work" || fail "work directory"
/usr/bin/python3 - <<'PY' || fail "making the texts"
line = "It was the best of times, it was the worst of times — naïve café 日本.\n"
open("a.txt", "w", encoding="utf-8").write(line * 300)
open("b.txt", "w", encoding="utf-8").write("Zwischenspiel ohne Zeilenende " * 100)
open("empty.txt", "w").close()
open("binary.txt", "wb").write(b"PK\x03\x04" + b"\x00" * 100)
open("latin1.txt", "wb").write(("café " * 100).encode("latin-1"))
open("short.txt", "w").write("too short")
PY
data=("$bin/kdp-data" import-text)
"${data[@]}" a.txt b.txt --out bytes.h5 --context 64 >bytes.log 2>&1 || { cat bytes.log; fail "import bytes"; }
grep -qE "train [0-9]+ rows, test [0-9]+ rows of context 64" bytes.log || { cat bytes.log; fail "no summary"; }
"${data[@]}" a.txt --out chars.h5 --context 32 --vocab chars --test-fraction 0.2 >/dev/null ||
  fail "import chars"
/usr/bin/python3 - <<'PY' || fail "the imported tokens"
import h5py, numpy as np
text = open("a.txt", "rb").read() + open("b.txt", "rb").read()
with h5py.File("bytes.h5") as f:
    for split in ("train", "test"):
        g = f[split]
        t = g["tokens"]
        assert t.dtype == np.uint8 and t.shape[1] == 65, t
        assert g.attrs["context"] == 64 and g.attrs["vocab_size"] == 256
        first = g.attrs["first_token"]
        for r in range(t.shape[0]):
            assert bytes(t[r]) == text[first + 64 * r:first + 64 * r + 65], (split, r)
    assert f["test"].attrs["first_token"] == len(text) - round(0.1 * len(text))
    assert f.attrs["dataset"] == "a"
chars = open("a.txt", encoding="utf-8").read()
with h5py.File("chars.h5") as f:
    vocab = f["vocab"][()]
    assert vocab.dtype == np.uint32 and list(vocab) == sorted(set(map(ord, chars)))
    t = f["train/tokens"][()]
    decoded = "".join(chr(vocab[i]) for i in np.concatenate([t[0], t[1:, 1:].ravel()]))
    assert chars.startswith(decoded), decoded[:80]
    assert f["train"].attrs["tokenizer"] == "chars"
PY
"$bin/kdp-data" info bytes.h5 >info.log 2>&1 || { cat info.log; fail "kdp-data info"; }
grep -q "/train/tokens  uint8 \[" info.log || { cat info.log; fail "info does not list the tokens"; }
grep -q "training:   '/train/tokens' of 'bytes.h5': [0-9]* windows of 64 bytes tokens" info.log ||
  { cat info.log; fail "info does not say what kdp-train would read"; }
echo "ok: bytes of two files and chars with their table imported as windows at stride N, listed by info"

refuse() {  # refuse NAME TEXT ARGS...: exit 1 with TEXT, and nothing written
  local name=$1 text=$2
  shift 2
  rm -f out.h5
  "${data[@]}" --out out.h5 "$@" >"$name.log" 2>&1 && fail "$name was imported"
  head -1 "$name.log" | grep -qF -- "$text" || { cat "$name.log"; fail "$name: the first line lacks '$text'"; }
  [[ ! -e out.h5 ]] || fail "$name: out.h5 was written"
}
refuse empty "'empty.txt' holds no text" empty.txt --context 8
refuse binary "'binary.txt' holds a NUL byte at byte offset 4" binary.txt --context 8
refuse latin1 "'latin1.txt' is not UTF-8 text" latin1.txt --context 8 --vocab chars
refuse short "'short.txt' gives 9 tokens (bytes)" short.txt --context 8
refuse missing "nope.txt" a.txt nope.txt --context 8
refuse context "--context must be at least 1" a.txt --context 0
refuse fraction "test fraction 1" a.txt --context 8 --test-fraction 1
before=$(sha256sum bytes.h5)
"${data[@]}" a.txt --out bytes.h5 --context 8 >exists.log 2>&1 && fail "an existing output was replaced"
grep -q "already has a .train. split; --overwrite replaces it" exists.log || { cat exists.log; fail "existing output: no clear message"; }
[[ $(sha256sum bytes.h5) == "$before" ]] || fail "the existing output changed"
"${data[@]}" a.txt --out bytes.h5 --context 8 --overwrite >/dev/null || fail "--overwrite"
echo "ok: empty, binary, not UTF-8, too short, missing, bad options and an existing output refused, each saying why; --overwrite replaces"
