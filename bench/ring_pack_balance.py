#!/usr/bin/env python3
"""How evenly the ring's zigzag split of packed rows shares attention over the cp ranks
(docs/long_context.md, "Under context parallelism"): from a token file's document index, every
window of T tokens cut into its documents as `--pack documents` cuts them, a query at position p
of a document starting at s scoring p - s + 1 keys; per micro-batch of B windows, each rank's
pairs (its zigzag chunks r and 2cp-1-r of every row), against a contiguous split of the rows
and against each document's own zigzag split (src/weft/data/doc_zigzag.hpp's rule, which the
engine's attention does not run yet): a document longer than --split-above tokens (default a
quarter chunk, T / 8cp, as doc_zigzag.hpp's split_above) cut into 2cp pieces of ceil(n / 2cp)
tokens (the last padded; padding is masked, so it scores nothing), pieces r and 2cp-1-r to
rank r; a shorter one kept whole, longest first, on the rank with the fewest pairs among those
whose tokens stay within the micro-batch's share (B T / cp plus the split documents' padding,
over cp; else on the one with the fewest tokens).

    bench/ring_pack_balance.py IDX T CP B [--width C] [--split-above N]

Prints per micro-batch max/min and max/mean of the ranks' pairs (mean, 95th percentile,
worst), the contiguous split's max/mean, the per-document split's max/min and max/mean (mean,
worst), its tokens max/min, padding and step max/mean, the mean keys a query sees, and the step's max/mean
when every token also costs the matmuls of a width-C model (24 C^2 flops a token and layer
forward, against 4 C a (query, key) pair: 6 C pairs a token). Windows in file order; the
loader's shuffle draws the same windows in another order. Standard library only."""
import argparse
import bisect
import struct


def document_starts(path):
    b = open(path, 'rb').read()
    if b[:8] != b'weftdocs':
        raise SystemExit(f"{path}: not a weft document index (magic 'weftdocs')")
    _, tokens, n = struct.unpack('<qqq', b[8:32])
    return list(struct.unpack('<%dq' % n, b[32:32 + 8 * n])), tokens


def pairs(start, lo, hi):
    """Keys seen by the queries at [lo, hi) of a document starting at `start`."""
    return (hi - lo) * (lo - start + 1 + hi - start) // 2 if hi > lo else 0


def share(work, pieces, start, end):
    """Adds a document [start, end) to work[owner] of each piece it crosses."""
    for lo, hi, owner in pieces:
        if lo < end and start < hi:
            work[owner] += pairs(start, max(start, lo), min(end, hi))


def per_document(docs, T, cp, B, above):
    """The per-document zigzag layout of a micro-batch's documents (lengths): each rank's pairs,
    its tokens (padding included) and the padding."""
    work, tokens, short, padding = [0] * cp, [0] * cp, [], 0
    for n in docs:
        if n <= above:
            short.append(n)
            continue
        m = -(-n // (2 * cp))
        padding += 2 * cp * m - n
        for i in range(2 * cp):
            r = i if i < cp else 2 * cp - 1 - i
            work[r] += pairs(0, i * m, min(n, i * m + m))
            tokens[r] += m
    share_tokens = -(-(B * T + padding) // cp)
    for n in sorted(short, reverse=True):
        fits = [r for r in range(cp) if tokens[r] + n <= share_tokens]
        r = (min(fits, key=lambda r: (work[r], tokens[r])) if fits
             else min(range(cp), key=lambda r: tokens[r]))
        work[r] += pairs(0, 0, n)
        tokens[r] += n
    return work, tokens, padding


def main():
    p = argparse.ArgumentParser()
    p.add_argument('index')
    p.add_argument('T', type=int)
    p.add_argument('cp', type=int)
    p.add_argument('B', type=int)
    p.add_argument('--width', type=int, default=768)
    p.add_argument('--split-above', type=int, default=0,
                   help='per-document split of documents longer than this (default T / 8cp)')
    a = p.parse_args()
    if a.T % (2 * a.cp):
        raise SystemExit(f'T={a.T} must be a multiple of 2*cp={2 * a.cp}')
    starts, tokens = document_starts(a.index)
    T, cp, B = a.T, a.cp, a.B
    c, L = T // (2 * cp), T // cp
    zigzag = [(i * c, i * c + c, i if i < cp else 2 * cp - 1 - i) for i in range(2 * cp)]
    contiguous = [(r * L, r * L + L, r) for r in range(cp)]
    token_cost = B * L * 6 * a.width
    ratio, over, cont, step, keys = [], [], [], [], []
    doc_ratio, doc_over, doc_tokens, doc_step, doc_pad = [], [], [], [], 0
    for w0 in range(0, tokens // T - B + 1, B):
        work, cwork, lengths = [0] * cp, [0] * cp, []
        for w in range(w0, w0 + B):
            first = w * T
            inside = starts[bisect.bisect_right(starts, first):bisect.bisect_left(starts, first + T)]
            edges = [0] + [s - first for s in inside] + [T]
            for s, e in zip(edges, edges[1:]):
                share(work, zigzag, s, e)
                share(cwork, contiguous, s, e)
                lengths.append(e - s)
        mean = sum(work) / cp
        ratio.append(max(work) / min(work))
        over.append(max(work) / mean)
        cont.append(max(cwork) / mean)
        step.append((max(work) + token_cost) / (mean + token_cost))
        keys.append(sum(work) / (B * T))
        dwork, dtok, pad = per_document(lengths, T, cp, B, a.split_above or T // (8 * cp))
        doc_ratio.append(max(dwork) / max(1, min(dwork)))
        doc_over.append(max(dwork) / (sum(dwork) / cp))
        doc_tokens.append(max(dtok) / min(dtok))
        doc_pad += pad
        cost = [w + t * 6 * a.width for w, t in zip(dwork, dtok)]
        doc_step.append(max(cost) / (sum(cost) / cp))
    n = len(ratio)
    avg = lambda x: sum(x) / len(x)
    print(f'{a.index} T={T} cp={cp} B={B}: {n} micro-batches; attention pairs max/min mean '
          f'{avg(ratio):.3f} p95 {sorted(ratio)[int(0.95 * n)]:.3f} worst {max(ratio):.3f}, '
          f'max/mean mean {avg(over):.3f} worst {max(over):.3f} (contiguous split {avg(cont):.3f}); '
          f'{avg(keys):.0f} keys a query; step at width {a.width}: max/mean mean {avg(step):.3f} '
          f'worst {max(step):.3f}; per-document split: pairs max/min mean {avg(doc_ratio):.3f} '
          f'worst {max(doc_ratio):.3f}, max/mean mean {avg(doc_over):.3f} worst {max(doc_over):.3f}, '
          f'tokens max/min mean {avg(doc_tokens):.3f} worst {max(doc_tokens):.3f}, '
          f'padding {doc_pad / (n * B * T):.2%} of the tokens, step max/mean mean '
          f'{avg(doc_step):.3f} worst {max(doc_step):.3f}')


if __name__ == '__main__':
    main()
