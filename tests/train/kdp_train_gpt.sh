#!/usr/bin/env bash
# kdp-train with the reference GPT, gpt(depth,heads,dim[,dropout]), on a
# user's own text imported by kdp-data import-text:
#  - the text: sentences drawn from a small grammar (its next character is
#    often determined), so a model that learns anything beats the order-0
#    entropy kdp-train prints; the validation bits per byte fall below it
#    after 2 epochs, in the epoch lines, the summary and the metrics file;
#  - bits per byte are the loss in nats over ln 2 (byte tokens: one byte a
#    token), checked in the metrics file;
#  - PyTorch rebuilds the model from kdp/nn/transformer.hpp's description
#    alone, loads the checkpoint's /model by name (the tied head under both
#    names) and reproduces kdp's test loss to 1e-5 relative and its accuracy
#    (the share of positions whose next token is the most likely);
#  - characters as tokens (--vocab chars, a text with non-ASCII letters)
#    train too, their bits per byte by the text's bytes per character;
#  - reproducible mode with dropout gives the same weights, bit for bit, at
#    1 rank (one and two threads), 2, 3 and 4 ranks, and stopped at 4 ranks
#    and resumed at 3;
#  - what does not fit is refused before training, naming it: a gpt on
#    images, an MLP on text, heads that do not divide dim.
#
#   kdp_train_gpt.sh TOOLS_DIR TESTS_SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
# shellcheck source=../reliability/common.sh
source "$src/reliability/common.sh"
cd "$work" || fail "work directory"
/usr/bin/python3 - <<'PY' || fail "making the texts"
import random
rng = random.Random(3)
names = ["the cat", "a dog", "my fox", "the owl", "a hen"]
verbs = ["sees", "likes", "hears", "finds"]
with open("story.txt", "w") as f:
    for _ in range(1400):
        f.write(f"{rng.choice(names)} {rng.choice(verbs)} {rng.choice(names)}.\n")
with open("lieder.txt", "w", encoding="utf-8") as f:
    for _ in range(700):
        f.write(rng.choice(["über ", "schön ", "grüß ", "maß "]) * 2 + "\n")
PY
"$bin/kdp-data" import-text story.txt --out story.h5 --context 32 >import.log 2>&1 ||
  { cat import.log; fail "importing the story"; }
common=(--data story.h5 --batch-size 32 --optimizer adam --lr 3e-3 --progress lines)
timeout 200 "$bin/kdp-train" "${common[@]}" --epochs 2 --model 'gpt(1,2,32,0)' --checkpoint-dir ck \
  --metrics m.csv >train.log 2>&1 || { cat train.log; fail "training gpt"; }
entropy=$(sed -n 's/.*order-0 entropy is \([0-9.]*\) bits per byte.*/\1/p' train.log)
[[ -n $entropy ]] || { head -4 train.log; fail "no order-0 entropy in kdp-train's first lines"; }
grep -q "val_bpb" train.log || { cat train.log; fail "no val_bpb in the epoch lines"; }
bpb=$(sed -n 's/.*test_bpb=\([0-9.]*\).*/\1/p' train.log)
awk -v b="$bpb" -v e="$entropy" 'BEGIN {exit !(b > 0 && b < e)}' ||
  { tail -4 train.log; fail "validation bits per byte $bpb not below the order-0 entropy $entropy"; }
echo "ok: gpt(1,2,32,0) learned the story: $bpb bits per byte against an order-0 entropy of $entropy"

PYTHONPATH="$src/ops" /usr/bin/python3 - <<'PY' || fail "PyTorch's rebuilt GPT with kdp's checkpoint"
import csv, glob, math, h5py, torch
from torch_reference_models import GPT  # as kdp/nn/transformer.hpp describes it

rows = [r for r in csv.DictReader(open("m.csv")) if r["type"] == "epoch"]
for r in rows:  # bits per byte: nats per token / ln 2 (byte tokens)
    for loss, bpb in (("loss", "bpb"), ("val_loss", "val_bpb")):
        assert abs(float(r[bpb]) - float(r[loss]) / math.log(2)) <= 1e-5 * float(r[bpb]), r
last = sorted(glob.glob("ck/ckpt-*.h5"))[-1]
with h5py.File(last) as f:
    state = {k: torch.tensor(v[()]) for k, v in f["model"].items()}
assert torch.equal(state["head.weight"], state["tok_embed.weight"]), "the tied head differs"
with h5py.File("story.h5") as f:
    rows_ = torch.tensor(f["test/tokens"][()]).long()
model = GPT(256, 32, 1, 2, 32, 0.0)
model.load_state_dict(state, strict=True)
model.eval()
with torch.no_grad():
    logits = model(rows_[:, :-1])
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), rows_[:, 1:].reshape(-1)).item()
acc = (logits.argmax(-1) == rows_[:, 1:]).float().mean().item()  # over every position
kdp_loss, kdp_acc = float(rows[-1]["val_loss"]), float(rows[-1]["val_accuracy"])
print(f"PyTorch {torch.__version__}: test loss {loss:.7g} (kdp {kdp_loss:.7g}), "
      f"next-token accuracy {acc:.6f} (kdp {kdp_acc:.6f})")
# The metrics file keeps 6 significant digits: a rounding of at most 5e-6.
assert abs(loss - kdp_loss) <= 1e-5 * abs(kdp_loss) + 5e-6 * abs(kdp_loss), (loss, kdp_loss)
assert abs(acc - kdp_acc) <= 1e-5, (acc, kdp_acc)
PY
echo "ok: PyTorch reproduces the test loss from the checkpoint, the head tied"

# Text from the checkpoint (a finished run resumed): the same seed gives the
# same sample, and it continues the prompt with the story's letters.
sample() {  # sample LOG SEED
  timeout 60 "$bin/kdp-train" "${common[@]}" --epochs 2 --model 'gpt(1,2,32,0)' --checkpoint-dir ck \
    --resume auto --sample 40 --temperature 0.7 --sample-seed "$2" --prompt "the " >"$1" 2>&1 ||
    { cat "$1"; fail "sampling from the checkpoint"; }
  sed -n '/^kdp-train: sample of 40 tokens/,$p' "$1" | tail -n +2
}
one=$(sample s1.log 5) two=$(sample s2.log 5) other=$(sample s3.log 6)
[[ -n $one && $one == "$two" ]] || fail "two samples of seed 5 differ: '$one' / '$two'"
[[ $one != "$other" ]] || fail "seeds 5 and 6 gave the same sample '$one'"
[[ $one == "the "* ]] || fail "the sample '$one' does not follow the prompt"
/usr/bin/python3 -c 'import sys; t = sys.argv[1][4:]; sys.exit(not (len(t.encode()) >= 35 and set(t) <= set("abcdefghijklmnopqrstuvwxyz .\n")))' "$one" ||
  fail "the sample '$one' is not 40 bytes of the story's letters"
echo "ok: a sample from the checkpoint, the same for the same seed: $(echo "$one" | head -1)"

"$bin/kdp-data" import-text lieder.txt --out lieder.h5 --context 16 --vocab chars >import.log 2>&1 ||
  { cat import.log; fail "importing characters"; }
timeout 120 "$bin/kdp-train" --data lieder.h5 --batch-size 32 --optimizer adam --lr 3e-3 \
  --progress lines --epochs 1 --model 'gpt(1,2,16,0)' --metrics c.csv >chars.log 2>&1 ||
  { cat chars.log; fail "training on characters"; }
grep -q "text: chars tokens" chars.log || { head -4 chars.log; fail "the character tokens not named"; }
/usr/bin/python3 - <<'PY' || fail "bits per byte of characters"
import csv, math
text = open("lieder.txt", encoding="utf-8").read()
r = [r for r in csv.DictReader(open("c.csv")) if r["type"] == "epoch"][-1]
ratio = float(r["val_loss"]) / math.log(2) / float(r["val_bpb"])  # bytes per token
whole = len(text.encode()) / len(text)
assert abs(ratio - whole) < 0.05 * whole, (ratio, whole)  # the validation text's share of it
PY
echo "ok: characters as tokens train, their bits per byte by the bytes a character takes"

# Reproducible mode with dropout on the tokens, the attention and the
# feed-forward: the same weights, bit for bit, at 1 rank of one and of two
# threads, 2, 3 and 4 ranks, and stopped at 4 ranks and resumed at 3.
repro=("${common[@]}" --batch-size 24 --model 'gpt(1,2,32,0.1)' --epochs 1 --reproducible)
layout() {  # layout NAME RANKS [ARGS...]
  local name=$1 ranks=$2
  shift 2
  timeout 120 mpirun "${mpi_flags[@]}" -np "$ranks" "$bin/kdp-train" "${repro[@]}" \
    --checkpoint-dir "$name" "$@" >"$name.log" 2>&1 || { cat "$name.log"; fail "reproducible, $name"; }
  grep -q "reproducible mode on" "$name.log" || { head -3 "$name.log"; fail "$name: the mode did not run"; }
}
layout r1 1 --threads 1 --max-steps 12
want=$(model_digest r1/ckpt-000000012.h5)
for args in "r1t2 1 --threads 2" "r2 2 --threads 1" "r3 3 --threads 1" "r4 4 --threads 1"; do
  read -r name ranks extra <<<"$args"
  # shellcheck disable=SC2086
  layout "$name" "$ranks" $extra --max-steps 12
  [[ $(model_digest "$name/ckpt-000000012.h5") == "$want" ]] ||
    fail "reproducible mode: $name gives other weights than 1 rank"
done
layout stopped 4 --threads 1 --max-steps 6
layout stopped 3 --threads 1 --max-steps 12 --resume auto
grep -q "written by 4 rank(s)" stopped.log || { cat stopped.log; fail "the 3-rank run did not resume"; }
[[ $(model_digest stopped/ckpt-000000012.h5) == "$want" ]] ||
  fail "reproducible mode: stopped at 4 ranks and resumed at 3, other weights than 1 rank's"
echo "ok: reproducible mode with dropout: the same weights at 1 (1 and 2 threads), 2, 3 and 4 ranks, and resumed at 3 from 4"

# Refused before training, naming what does not fit.
/usr/bin/python3 -c '
import h5py, numpy as np
with h5py.File("images.h5", "w") as f:
    for s in ("train", "test"):
        f[s + "/images"] = np.zeros((40, 1, 4, 4), np.float32)
        f[s + "/labels"] = np.arange(40, dtype=np.uint8) % 2
' || fail "making images"
refused images.log "learns next tokens, but" 'gpt(1,2,32)' --data images.h5
refused mlp.log "holds token windows (text): train them with --model 'gpt(depth,heads,dim)'" \
  '32,10,256' --data story.h5
refused heads.log "3 heads do not divide dim 32" 'gpt(1,3,32)' --data story.h5
refused sample.log "--sample 5 generates text" '4,2' --data images.h5 --sample 5
refused prompt.log "is not in the vocabulary" 'gpt(1,2,16)' --data lieder.h5 --sample 5 --prompt "x"
echo "ok: a gpt that does not fit, or text for another model, is refused, naming it"
