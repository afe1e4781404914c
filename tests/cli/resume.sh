# A run interrupted and resumed continues with losses bit-identical to an uninterrupted one, and
# a restart that redoes steps leaves each step's line in metrics.jsonl once: the new one.
source "$(dirname "$0")/lib.sh"
prepare_data
args=(--model tiny --data data/tinyshakespeare_train.bin --steps 8 --batch-size 4
      --micro-batch-size 2 --seq-len 32 --lr 1e-3 --warmup 2 --peak-gflops 100)
"$WEFT" train "${args[@]}" --out straight 2>/dev/null
"$WEFT" train "${args[@]}" --out split --exit-after 3 --save-every 2 2>/dev/null
[ "$(metric split/metrics.jsonl loss | wc -l)" -eq 3 ] && ok "first part stopped after 3 steps" || bad "first part ran $(metric split/metrics.jsonl loss | wc -l) steps"
# As if killed after step 3 was logged but before its checkpoint was committed: the restart
# from step 2 redoes step 3.
echo step_000002 >split/checkpoints/latest
"$WEFT" train "${args[@]}" --out split --exit-after 2 --resume 2>/dev/null
twice=$(grep '"loss"' split/metrics.jsonl | grep -o '"step":[0-9]*' | sort | uniq -d | tr '\n' ' ')
[ -z "$twice" ] && ok "each step logged once after redoing step 3" || bad "logged twice: $twice"
awk '/"event":"start"/ && /"step":2[,}]/ { s = NR } /"loss"/ && /"step":3[,}]/ { l = NR }
     END { exit !(s && l > s) }' split/metrics.jsonl &&
  ok "step 3's line is the redone one" || bad "step 3's line is not after the restart's start line"
"$WEFT" train "${args[@]}" --out split --resume 2>/dev/null
a=$(metric straight/metrics.jsonl loss | tr '\n' ' ')
b=$(metric split/metrics.jsonl loss | tr '\n' ' ')
echo "straight: $a"
echo "split:    $b"
[ "$a" = "$b" ] && ok "losses bit-identical over 8 steps" || bad "losses differ"
n1=$(metric straight/metrics.jsonl grad_norm | tr '\n' ' ')
n2=$(metric split/metrics.jsonl grad_norm | tr '\n' ' ')
[ "$n1" = "$n2" ] && ok "grad norms bit-identical" || bad "grad norms differ"
cmp -s straight/checkpoints/step_000008/rank_00000.bin split/checkpoints/step_000008/rank_00000.bin \
  && ok "final weights bit-identical" || bad "final weights differ"
finish
