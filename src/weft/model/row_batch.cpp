#include "weft/model/row_batch.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "weft/core/error.hpp"
#include "weft/kernels/attend_gathered.hpp"
#include "weft/kernels/chunk_team.hpp"
#include "weft/kernels/precision.hpp"

namespace weft::model {

void RowBatch::add(std::span<const int32_t> t, int64_t pos0, const BlockTable& table, bool logits) {
    add_from(t, pos0, table, int64_t(t.size()) - (logits ? 1 : 0));
}

void RowBatch::add_from(std::span<const int32_t> t, int64_t pos0, const BlockTable& table,
                        int64_t from) {
    const int64_t n = int64_t(t.size()), row0 = rows();
    seqs.push_back({row0, n, pos0, &table, {}});
    tokens.insert(tokens.end(), t.begin(), t.end());
    for (int64_t i = 0; i < n; ++i) positions.push_back(pos0 + i);
    for (int64_t i = std::max<int64_t>(from, 0); i < n; ++i) logit_rows.push_back(row0 + i);
}

void RowBatch::add_tree(std::span<const int32_t> t, std::span<const int32_t> parents, int64_t pos0,
                        const BlockTable& table) {
    const int64_t n = int64_t(t.size()), row0 = rows();
    WEFT_CHECK(parents.size() == t.size() && (n == 0 || parents[0] == -1),
               "internal: a tree of {} rows with {} parents", n, parents.size());
    std::vector<int64_t> depth(size_t(n), 0);
    for (int64_t i = 1; i < n; ++i) {
        WEFT_CHECK(parents[size_t(i)] >= 0 && parents[size_t(i)] < i,
                   "internal: row {} of a tree has parent {}", i, parents[size_t(i)]);
        depth[size_t(i)] = depth[size_t(parents[size_t(i)])] + 1;
    }
    seqs.push_back({row0, n, pos0, &table, {parents.begin(), parents.end()}});
    tokens.insert(tokens.end(), t.begin(), t.end());
    for (int64_t i = 0; i < n; ++i) {
        positions.push_back(pos0 + depth[size_t(i)]);
        logit_rows.push_back(row0 + i);
    }
}

const float* RowBatch::embedding(int64_t r, const float* wte, int64_t vocab_size, int64_t C) const {
    const int64_t t = tokens[size_t(r)];
    return t < vocab_size ? wte + t * C : extra + (t - vocab_size) * C;
}

void RowBatch::clear() {
    tokens.clear();
    positions.clear();
    seqs.clear();
    logit_rows.clear();
    extra = nullptr;
    extra_count = 0;
    shortlist = nullptr;
    shortlist_all = false;
    kv_moves.clear();
}

// Layout: rows, sequences, logit rows, extra inputs, KV move words; tokens, positions,
// logit_rows, kv_moves; per sequence row0, rows, pos0, its table's size, its parents' count, then
// the table's blocks and the parents.
std::vector<int64_t> RowBatch::pack() const {
    std::vector<int64_t> w = {rows(), int64_t(seqs.size()), int64_t(logit_rows.size()), extra_count,
                              int64_t(kv_moves.size())};
    w.insert(w.end(), tokens.begin(), tokens.end());
    w.insert(w.end(), positions.begin(), positions.end());
    w.insert(w.end(), logit_rows.begin(), logit_rows.end());
    w.insert(w.end(), kv_moves.begin(), kv_moves.end());
    for (const RowSeq& s : seqs) {
        w.insert(w.end(),
                 {s.row0, s.rows, s.pos0, int64_t(s.table->size()), int64_t(s.parents.size())});
        w.insert(w.end(), s.table->begin(), s.table->end());
        w.insert(w.end(), s.parents.begin(), s.parents.end());
    }
    return w;
}

void RowBatch::unpack(std::span<const int64_t> words, std::vector<BlockTable>& tables) {
    clear();
    size_t at = 0;
    auto take = [&](int64_t n) {
        WEFT_CHECK(n >= 0 && at + size_t(n) <= words.size(),
                   "internal: a packed row batch of {} words cut at {}", words.size(), at);
        const std::span<const int64_t> out = words.subspan(at, size_t(n));
        at += size_t(n);
        return out;
    };
    const std::span<const int64_t> head = take(5);
    const int64_t n_rows = head[0], n_seqs = head[1], n_logits = head[2];
    WEFT_CHECK(head[4] % 2 == 0, "internal: a packed row batch of {} KV move words (pairs)",
               head[4]);
    extra_count = head[3];
    for (int64_t t : take(n_rows)) tokens.push_back(int32_t(t));
    const std::span<const int64_t> pos = take(n_rows), lr = take(n_logits), moves = take(head[4]);
    positions.assign(pos.begin(), pos.end());
    logit_rows.assign(lr.begin(), lr.end());
    kv_moves.assign(moves.begin(), moves.end());
    // Sized first: the sequences point into it.
    tables.assign(size_t(std::max<int64_t>(n_seqs, 0)), {});
    for (BlockTable& table : tables) {
        const std::span<const int64_t> s = take(5);
        for (int64_t b : take(s[3])) table.push_back(int32_t(b));
        RowSeq seq{s[0], s[1], s[2], &table, {}};
        for (int64_t p : take(s[4])) seq.parents.push_back(int32_t(p));
        seqs.push_back(std::move(seq));
    }
    WEFT_CHECK(at == words.size(), "internal: a packed row batch of {} words has {} left over",
               words.size(), words.size() - at);
}

void attend_rows(float* out, float* qkv, int64_t ld, const RowBatch& b, KvPool& kv, int layer,
                 int64_t NH, int64_t NKV, int64_t HS, const RowHeadPrepare& prepare) {
    const int64_t A = NH * HS, KV = NKV * HS, G = NH / NKV, R = b.rows();
    WEFT_CHECK(KV == kv.width() && HS == kv.head_size() && NH % NKV == 0,
               "internal: attention of {} heads over {} kv heads of {} into a pool {} wide in "
               "heads of {}",
               NH, NKV, HS, kv.width(), kv.head_size());
    // The i-th row of `s`: its queries q of kv head g's group and its key k prepared (at the
    // row's position), then its key and value v of head g stored (in its slot, pos0 + i: a tree's
    // rows are at their depth's position).
    auto store = [&](const RowSeq& s, int64_t i, int64_t g, float* q, float* k, const float* v) {
        const int64_t slot = s.pos0 + i;
        if (prepare) prepare(q, k, b.positions[size_t(s.row0 + i)]);
        if (kv.bf16()) {
            kernels::convert_fp32_to_bf16(kv.k16(*s.table, layer, slot, g), k, 1, HS, HS);
            kernels::convert_fp32_to_bf16(kv.v16(*s.table, layer, slot, g), v, 1, HS, HS);
        } else {
            std::copy_n(k, HS, kv.k(*s.table, layer, slot, g));
            std::copy_n(v, HS, kv.v(*s.table, layer, slot, g));
        }
    };
    // Where row `row`'s queries of kv head g's group, its key and its value of head g lie in qkv.
    auto head_of = [&](int64_t row, int64_t g) {
        float* r = qkv + row * ld;
        return std::array<float*, 3>{r + g * G * HS, r + A + g * HS, r + A + KV + g * HS};
    };
    // The same in place, in qkv's row.
    auto store_row = [&](const RowSeq& s, int64_t i, int64_t g) {
        const auto [q, k, v] = head_of(s.row0 + i, g);
        store(s, i, g, q, k, v);
    };
    // A sequence of one row (a request's decode step) is read by that row alone: its task
    // prepares and stores what it then reads, on whichever thread runs it, rather than this
    // thread doing every row's first (16 requests' rope and stores were 0.3-0.5 ms of a 16-17 ms
    // step). Rows of longer sequences read each other's keys, so theirs are stored first. Unless
    // a table comes twice (no caller does that), when every row is stored first.
    thread_local std::vector<const BlockTable*> single;
    single.clear();
    for (const RowSeq& s : b.seqs)
        if (s.rows == 1) single.push_back(s.table);
    std::sort(single.begin(), single.end());
    const bool in_task = std::adjacent_find(single.begin(), single.end()) == single.end();
    auto stored_in_task = [&](const RowSeq& s) { return in_task && s.rows == 1; };
    std::vector<const RowSeq*> seq_of(static_cast<size_t>(R));
    for (const RowSeq& s : b.seqs)
        for (int64_t i = 0; i < s.rows; ++i) {
            seq_of[size_t(s.row0 + i)] = &s;
            if (!stored_in_task(s))
                for (int64_t g = 0; g < NKV; ++g) store_row(s, i, g);
        }
    const float scale = 1.0f / std::sqrt(float(HS));
    // A row's G query heads of one kv head together (its keys and values read once), whole in
    // one thread.
    auto task = [&](int64_t t) {
        // Kept between calls: a decode step calls this once a layer.
        thread_local std::vector<float> scores;
        thread_local std::vector<int64_t> slots;  // a tree path's slots (below)
        thread_local std::vector<const float*> keys, values;
        thread_local std::vector<const uint16_t*> keys16, values16;
        thread_local std::vector<float> own;  // a prepared row's queries, key and value
        const int64_t row = t / NKV, g = t % NKV, pos = b.positions[size_t(row)];
        const RowSeq& s = *seq_of[size_t(row)];
        const float* q = head_of(row, g)[0];
        if (stored_in_task(s) && prepare) {
            // Prepared in a copy of this thread's own: about half of qkv's lines were written
            // by the other thread's share of the product, and rewriting them in place waits for
            // that thread's copies to be dropped. 16 decode rows' attention over 30 layers of the
            // 135M model (bf16, a scratch harness, 49 rounds alternated): 1.156 -> 1.085 ms.
            const auto [q_in, k_in, v_in] = head_of(row, g);
            own.resize(size_t((G + 2) * HS));
            float *q_own = own.data(), *k_own = q_own + G * HS, *v_own = k_own + HS;
            std::copy_n(q_in, G * HS, q_own);
            std::copy_n(k_in, HS, k_own);
            std::copy_n(v_in, HS, v_own);
            store(s, 0, g, q_own, k_own, v_own);
            q = q_own;
        } else if (stored_in_task(s)) {
            store_row(s, 0, g);
        }
        const BlockTable& table = *s.table;
        // Under a tree of guesses, the slots of the path from the row up to row 0 (positions
        // pos0 to pos), written from the end; the positions before are their own slots.
        slots.resize(size_t(pos + 1));
        if (!s.parents.empty()) {
            int64_t at = pos;
            for (int64_t i = row - s.row0; i >= 0; i = s.parents[size_t(i)])
                slots[size_t(at--)] = s.pos0 + i;
        }
        const int64_t n = pos + 1;
        scores.resize(size_t(G * n));
        float* o = out + row * A + g * G * HS;
        // The same gather for either pool: its keys' and values' addresses in position order.
        auto gather = [&](auto& ks, auto& vs, auto k_at, auto v_at) {
            ks.resize(size_t(n));
            vs.resize(size_t(n));
            // The prefix's slots are its positions: a block's addresses from its first one
            // (KvPool's runs), rather than a division each (after a long prompt the gather was
            // a twentieth of a decode step). Then a tree's path, slot by slot.
            const int64_t run_end = s.parents.empty() ? n : s.pos0, bt = kv.block_tokens();
            int64_t j = 0;
            while (j < run_end) {
                const int64_t end = std::min(run_end, (j / bt + 1) * bt);
                const auto k0 = k_at(j), v0 = v_at(j);
                for (int64_t i = j; i < end; ++i) {
                    ks[size_t(i)] = k0 + (i - j) * HS;
                    vs[size_t(i)] = v0 + (i - j) * HS;
                }
                j = end;
            }
            for (; j < n; ++j) {
                ks[size_t(j)] = k_at(slots[size_t(j)]);
                vs[size_t(j)] = v_at(slots[size_t(j)]);
            }
            kernels::attend_gathered_group(o, q, G, ks.data(), vs.data(), n, HS, scale,
                                           scores.data());
        };
        if (kv.bf16())
            gather(
                keys16, values16, [&](int64_t p) { return kv.k16(table, layer, p, g); },
                [&](int64_t p) { return kv.v16(table, layer, p, g); });
        else
            gather(
                keys, values, [&](int64_t p) { return kv.k(table, layer, p, g); },
                [&](int64_t p) { return kv.v(table, layer, p, g); });
    };
    // Threads only for work that pays for handing it out (a tiny model's step is microseconds).
    int64_t work = 0;
    for (int64_t p : b.positions) work += (p + 1) * NH * HS;
    // First the team that runs the products (kernels/chunk_team.hpp): in decode it spins since
    // the q/k/v product just before, so it takes a task at once, opens no parallel region, and
    // its thread does not fall asleep while this one attends alone.
    if (work >= (int64_t(1) << 12) && kernels::team_for(R * NKV, task)) return;
    // Not `omp parallel if`: a region even of one thread costs a futex call (kernels/omp_for.hpp).
    if (work < (int64_t(1) << 18)) {
        for (int64_t t = 0; t < R * NKV; ++t) task(t);
        return;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < R * NKV; ++t) task(t);
}

}  // namespace weft::model
