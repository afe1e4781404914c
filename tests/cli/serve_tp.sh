# Tensor-parallel serving: `mpirun -np 2 weft serve --tp 2` answers greedy completions (alone and
# four at once, prompts prefilled in chunks) with the tokens of a tp 1 server and logprobs within
# 1e-4, for GPT-2 (4 heads, guessing tokens with --spec ppd's tree: prompt rows that are no
# token) and Llama (8 heads over 4 kv heads, guessing with --spec draft on rank 0 with leaves,
# whose kept nodes move keys on every rank); `weft sample --tp 2` writes what `weft sample` does,
# plainly and with --spec ppd or ngram; SIGTERM on rank 0 drains and every rank exits 0; a bad
# --tp is one clear error before any port is bound.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
prepare_data
for m in tiny llama-tiny; do
  "$WEFT" train --model $m --data data/tinyshakespeare_train.bin --out $m --steps 2 \
    --save-every 1 --batch-size 2 --seq-len 32 --peak-gflops 100 >/dev/null 2>&1
  "$WEFT" train --ppd-tokens 2 --base $m --data data/tinyshakespeare_train.bin --out ppd-$m \
    --steps 3 --batch-size 2 --seq-len 24 --lr 1e-2 >/dev/null 2>&1
done
tok=(--tokenizer-dir "$SRC/data")

expect_error "weft serve --tp 2 runs one rank per tensor-parallel shard, but the job has 1 rank (expected mpirun -np 2 weft serve --tp 2" "" -- serve --ckpt tiny "${tok[@]}" --tp 2
# mpirun_error <text> <np> weft args...: one rank names the error, the job fails, no port bound.
mpirun_error() {
  local want=$1 np=$2 out rc=0
  shift 2
  out=$(timeout 60 mpirun -np "$np" "$WEFT" "$@" 2>&1) || rc=$?
  if [ "$rc" -ne 0 ] && [ "$(grep -cF -- "$want" <<<"$out")" = 1 ] && ! grep -q "http://" <<<"$out"; then
    ok "mpirun -np $np weft $* -> exit $rc: $(grep -F -- "$want" <<<"$out")"
  else
    bad "mpirun -np $np weft $*: exit $rc, expected one error containing '$want': $out"
  fi
}
mpirun_error "weft serve --tp 3 runs one rank per tensor-parallel shard, but the job has 2 ranks (expected mpirun -np 3" 2 serve --ckpt tiny "${tok[@]}" --tp 3
mpirun_error "4 attention heads do not split over tensor-parallel degree 3" 3 serve --ckpt tiny "${tok[@]}" --tp 3

# start <name> <tp>: a server of small steps (prompts past 8 tokens prefilled in chunks) in the
# background, its pid (of mpirun at tp > 1) in pids[name]; wait_url puts its URL in urls[name].
declare -A pids urls
start() {
  local launch=("$WEFT")
  [ "$2" -gt 1 ] && launch=(mpirun -np "$2" "$WEFT")
  "${launch[@]}" serve --tp "$2" --ckpt "$ckpt" "${tok[@]}" --port 0 --batch-tokens 8 \
    --kv-cache-gib 0.001 --threads 1 "${@:3}" >"$1.out" 2>"$1.err" &
  pids[$1]=$!
}
stop_all() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap 'stop_all; rm -rf "$WORK"' EXIT
wait_url() {
  for _ in $(seq 300); do grep -q "http://" "$1.out" && break; sleep 0.1; done
  urls[$1]=$(grep -o "http://[0-9.:]*" "$1.out") || { bad "$1 did not start: $(cat "$1.err")"; finish; exit 1; }
}
complete() {  # <url> <prompt> <max_tokens>: the answer's token ids and logprobs
  curl -s --max-time 30 -d '{"prompt":"'"$2"'","max_tokens":'"$3"',"temperature":0,"logprobs":1}' \
    "$1/v1/completions" | jq -c '.choices[0].logprobs | {token_ids, token_logprobs}'
}
prompts=("ROMEO:" "To be, or not to be, that is the question" "First Citizen: Before we proceed any further" "O")

# GPT-2's tp 2 server guesses tokens by PPD's tree, Llama's by a draft on rank 0 with leaves:
# the model a step younger, whose second choice is sometimes the model's first, so that a kept
# leaf's keys move (on rank 1 with the next step). The same greedy tokens.
declare -A spec=([tiny]="ppd --ppd ppd-tiny --spec-tree 4 --spec-tokens 2"
  [llama-tiny]="draft --draft llama-tiny/checkpoints/step_000001 --spec-tokens 3 --draft-width 2")
for ckpt in tiny llama-tiny; do
  start tp1 1
  # shellcheck disable=SC2086 # the proposer's words
  start tp2 2 --spec ${spec[$ckpt]}
  wait_url tp1
  wait_url tp2
  grep -q ", tp 2, " tp2.out && ok "$ckpt: start line: $(cat tp2.out | head -1)" || bad "start line: $(cat tp2.out)"
  # Alone, then the four at once (batched, decoding while others prefill).
  worst=0 same=0
  for i in "${!prompts[@]}"; do complete "${urls[tp1]}" "${prompts[$i]}" 16 >"want$i"; done
  for i in "${!prompts[@]}"; do complete "${urls[tp2]}" "${prompts[$i]}" 16 >"alone$i"; done
  for i in "${!prompts[@]}"; do complete "${urls[tp2]}" "${prompts[$i]}" 16 >"among$i" & done
  wait_jobs() { for j in $(jobs -p); do [[ " ${pids[*]} " == *" $j "* ]] || wait "$j"; done; }
  wait_jobs
  for i in "${!prompts[@]}"; do
    for got in alone$i among$i; do
      if [ "$(jq -c .token_ids "want$i")" = "$(jq -c .token_ids "$got")" ] && [ "$(jq '.token_ids|length' "$got")" = 16 ]; then
        same=$((same + 1))
      else
        bad "$ckpt $got: tp 2 $(cat "$got"), tp 1 $(cat "want$i")"
      fi
      worst=$(jq -n --slurpfile a "want$i" --slurpfile b "$got" --argjson w "$worst" \
        '[$a[0].token_logprobs, $b[0].token_logprobs] | transpose | map(.[0] - .[1] | fabs) + [$w] | max')
    done
  done
  [ "$same" = 8 ] && ok "$ckpt: greedy tokens of tp 2 = tp 1, alone and four at once"
  awk -v w="$worst" 'BEGIN { exit !(w < 1e-4) }' && ok "$ckpt: logprobs of tp 2 within $worst of tp 1's" \
    || bad "$ckpt: logprobs differ by $worst"
  # A prompt scored at tp 2 (echo with logprobs): the tokens tp 2 generated, scored as a prompt,
  # get the bits their decode steps gave them.
  g=$(curl -s --max-time 30 -d '{"prompt":"'"${prompts[1]}"'","max_tokens":16,"temperature":0,"logprobs":1,"echo":true}' \
    "${urls[tp2]}/v1/completions" | jq -c .choices[0].logprobs)
  sc=$(curl -s --max-time 30 -d "$(jq -c '{prompt: [.token_ids], max_tokens: 1, temperature: 0, logprobs: 1, echo: true}' <<<"$g")" \
    "${urls[tp2]}/v1/completions" | jq -c .choices[0].logprobs)
  [ "$(jq -c '.token_ids[-16:]' <<<"$g")" = "$(jq -c .token_ids alone1)" ] &&
    [ "$(jq -c '.token_logprobs[:-1]' <<<"$sc")" = "$(jq -c .token_logprobs <<<"$g")" ] \
    && ok "$ckpt: tp 2 scores its own greedy text as it decoded it: $(jq -c '.token_logprobs[-3:]' <<<"$g")" \
    || bad "$ckpt: tp 2 echo: $g scored as $sc"
  # The draft (the model a step younger) has guesses kept; PPD's prompts, 3 steps old over a
  # model 2 steps old, guess a tree (more guesses a verify than a chain of 2) but rarely well.
  met=$(curl -s --max-time 10 "${urls[tp2]}/metrics")
  accepted=$(awk '/^weft_spec_accepted_tokens_total/ { print $2 }' <<<"$met")
  guessed=$(awk '/^weft_spec_guessed_tokens_total/ { print $2 }' <<<"$met")
  verifies=$(awk '/^weft_spec_verifies_total/ { print $2 }' <<<"$met")
  if [ "$ckpt" = tiny ]; then
    [ "${verifies:-0}" -gt 0 ] && [ "${guessed:-0}" -gt $((2 * ${verifies:-0})) ] \
      && ok "$ckpt: tp 2 with --spec ${spec[$ckpt]}: $verifies verifies of $guessed guesses" \
      || bad "$ckpt: tp 2 PPD metrics: $met"
  else
    [ "${accepted:-0}" -gt 0 ] && ok "$ckpt: tp 2 with --spec ${spec[$ckpt]} accepted $accepted guessed tokens" \
      || bad "$ckpt: no guessed token accepted at tp 2"
  fi

  # SIGTERM on rank 0 (mpirun itself would kill the job): the stream in flight ends, every rank
  # exits 0, and so does mpirun.
  curl -s -N --max-time 30 -d '{"prompt":"ROMEO:","max_tokens":40,"stream":true}' \
    "${urls[tp2]}/v1/completions" >drain.txt &
  client=$!
  sleep 0.3
  rank0=
  for p in $(pgrep -P "${pids[tp2]}"); do
    tr '\0' '\n' <"/proc/$p/environ" | grep -qx OMPI_COMM_WORLD_RANK=0 && rank0=$p
  done
  kill -TERM "$rank0" "${pids[tp1]}"
  rc=0
  timeout 60 tail --pid="${pids[tp2]}" -f /dev/null || rc=$?
  wait "${pids[tp2]}" || rc=$?
  wait "${pids[tp1]}" || true
  wait $client || true
  [ "$rc" = 0 ] && grep -q "SIGTERM: draining" tp2.err && ok "$ckpt: SIGTERM on rank 0: mpirun exits 0" \
    || bad "$ckpt: SIGTERM: exit $rc: $(cat tp2.err)"
  grep -q '^data: \[DONE\]' drain.txt && ok "$ckpt: in-flight stream drained" || bad "drain: $(tail -c 300 drain.txt)"
  unset 'pids[tp1]' 'pids[tp2]'
done

# weft sample runs the same rows: tp 2 prints what one process does, with guesses or without.
for ckpt in tiny llama-tiny; do
  want=$("$WEFT" sample --ckpt $ckpt "${tok[@]}" --prompt "ROMEO:" --tokens 16 --temperature 0)
  for guess in "none" "ppd --ppd ppd-$ckpt" "ngram"; do
    # shellcheck disable=SC2086 # the proposer's words
    got=$(timeout 60 mpirun -np 2 "$WEFT" sample --tp 2 --ckpt $ckpt "${tok[@]}" --prompt "ROMEO:" \
      --tokens 16 --temperature 0 --spec $guess 2>sample.err)
    [ "$got" = "$want" ] && ok "$ckpt: weft sample --tp 2 --spec $guess = weft sample ($(grep -m1 -o 'speculation.*' sample.err))" ||
      bad "$ckpt: sample tp 2 --spec $guess '$got' vs '$want': $(cat sample.err)"
  done
done
finish
