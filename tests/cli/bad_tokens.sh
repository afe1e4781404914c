# Token ids outside the model's vocabulary are refused before any step, naming the file and the
# first bad position, with nothing written; uint32 token files (llm.c's Llama 3 layout) train and
# evaluate as their uint16 twins do.
source "$(dirname "$0")/lib.sh"
prepare_data
common=(--model tiny --steps 1 --batch-size 2 --seq-len 32 --peak-gflops 1)

# An llm.c uint16 file holding id 65535 (past GPT-2's 50257) at token 1000 of the data.
cp data/tinyshakespeare_val.bin bad.bin
printf '\xff\xff' | dd of=bad.bin bs=1 seek=$((1024 + 2 * 1000)) conv=notrunc status=none
want="token file 'bad.bin' holds token id 65535 at position 1000"

# The same tokens in llm.c's uint32 layout (magic 20240801, version 7), optionally with token
# $3 replaced by id $4.
to_uint32() {
  perl -e 'my ($in, $out, $pos, $id) = @ARGV;
    open my $f, "<:raw", $in or die; read $f, my $h, 1024; local $/; my @t = unpack "v*", <$f>;
    $t[$pos] = $id if defined $pos;
    open my $o, ">:raw", $out or die;
    print $o pack("l<3", 20240801, 7, scalar @t), "\0" x 1012, pack("V*", @t);' "$@"
}
to_uint32 data/tinyshakespeare_val.bin val32.bin
to_uint32 data/tinyshakespeare_val.bin bad32.bin 5 70000

expect_error "$want" runs/bad -- train "${common[@]}" --data bad.bin --out runs/bad
expect_error "token file 'bad32.bin' holds token id 70000 at position 5" runs/bad -- \
  train "${common[@]}" --data bad32.bin --out runs/bad
expect_error "$want" runs/badval -- \
  train "${common[@]}" --data data/tinyshakespeare_train.bin --val-data bad.bin --out runs/badval

"$WEFT" train "${common[@]}" --data data/tinyshakespeare_train.bin --out runs/ok >/dev/null 2>&1 ||
  bad "training on the prepared data failed"
expect_error "$want" "" -- eval --ckpt runs/ok --data bad.bin --batch-size 1 --seq-len 8
expect_error "outside the model's vocabulary of 50257 ids" "" -- \
  eval --ckpt runs/ok --data bad32.bin --batch-size 1 --seq-len 8

# A uint32 file gives the very loss its uint16 twin gives, and trains.
l16=$("$WEFT" eval --ckpt runs/ok --data data/tinyshakespeare_val.bin --batch-size 2 --seq-len 32 --json)
l32=$("$WEFT" eval --ckpt runs/ok --data val32.bin --batch-size 2 --seq-len 32 --json)
[ -n "$l16" ] && [ "$l16" = "$l32" ] && ok "uint32 eval equals uint16 eval: $l32" ||
  bad "uint32 eval '$l32' differs from uint16 eval '$l16'"
"$WEFT" train "${common[@]}" --data val32.bin --val-data val32.bin --out runs/u32 >/dev/null 2>&1 &&
  [ -f runs/u32/checkpoints/latest ] && ok "trained on a uint32 file" || bad "training on val32.bin failed"
finish
