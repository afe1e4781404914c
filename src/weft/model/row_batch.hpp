#pragma once
// The rows of one forward over several sequences at once (Model::forward_rows): each sequence
// brings a run of consecutive positions (a prompt chunk, or one decode token) and its block
// table in a KvPool; a row's result depends only on its sequence's tokens, never on the other
// rows of the batch nor on how its own sequence was cut into calls (batch invariance,
// docs/serving.md).
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "weft/model/kv_pool.hpp"
#include "weft/model/vocab_shortlist.hpp"

namespace weft::model {

struct RowSeq {
    int64_t row0, rows, pos0;  // rows row0.. of the batch are positions pos0..
    const BlockTable* table;   // covers pos0 + rows positions
    // A tree of rows instead of a run (speculative decoding's verify, decode/token_tree.hpp):
    // parents[i] is row i's parent among the sequence's rows (-1 for row 0, and parents come
    // first). Row i's keys and values go to slot pos0 + i, its position is pos0 + its depth,
    // and it attends to positions 0 .. pos0 - 1 and to the slots of its path from row 0: the
    // keys, in the same order, that it would see decoded one token at a time along that path.
    // Empty: a run (row i's parent is row i - 1).
    std::vector<int32_t> parents;
};

struct RowBatch {
    std::vector<int32_t> tokens;     // [rows]
    std::vector<int64_t> positions;  // [rows]
    std::vector<RowSeq> seqs;
    std::vector<int64_t> logit_rows;  // the rows whose logits are wanted, in the order returned
    // Inputs that are no token (Parallel Prompt Decoding's trained prompt tokens, decode/ppd.hpp):
    // ids vocab_size .. vocab_size + extra_count - 1 stand for the rows of extra [extra_count, C],
    // which take the token embedding's place (a learned position embedding is still added).
    const float* extra = nullptr;
    int64_t extra_count = 0;
    // Logit rows that only propose tokens get logits over this shortlist alone, -inf elsewhere
    // (model/vocab_shortlist.hpp): the rows of extra inputs (prompt rows), and every row when
    // `shortlist_all` (a draft model's batch). Null: every row over the whole vocabulary.
    const VocabShortlist* shortlist = nullptr;
    bool shortlist_all = false;
    // Keys and values a tensor-parallel follower moves in its pool before it runs these rows,
    // pairs of pool slots (KvPool::slot), from then to: the leader's moves of the accepted
    // nodes of its last verifies (decode::keep_accepted), which it made in its own pool then.
    std::vector<int64_t> kv_moves;

    int64_t rows() const { return int64_t(tokens.size()); }
    // Appends `t` at positions pos0.. of the sequence of `table`; with `logits`, its last row's
    // logits are wanted.
    void add(std::span<const int32_t> t, int64_t pos0, const BlockTable& table, bool logits);
    // The same with the logits of every row from row `from` of `t` on (a prompt scored token by
    // token: a server's echo with logprobs).
    void add_from(std::span<const int32_t> t, int64_t pos0, const BlockTable& table, int64_t from);
    // Appends the rows of a tree (RowSeq::parents) from pos0 on, every row's logits wanted.
    void add_tree(std::span<const int32_t> t, std::span<const int32_t> parents, int64_t pos0,
                  const BlockTable& table);
    void clear();
    // Whether logit row i (of logit_rows) takes the shortlist, for a model of `vocab_size` ids.
    bool proposes(size_t i, int64_t vocab_size) const {
        return shortlist && (shortlist_all || tokens[size_t(logit_rows[i])] >= vocab_size);
    }

    // The batch as integers, for ranks that run the same forward (tensor-parallel serving): its
    // rows, each sequence's run or tree with its block table's blocks, the number of extra
    // inputs (not their rows: each rank holds its own copy) and the KV moves.
    std::vector<int64_t> pack() const;
    // The batch `words` packed, its sequences' block tables kept in `tables` (which must stay
    // as they are while the batch is used); `extra` stays null for the caller to set. An error
    // when the words are not a packed batch.
    void unpack(std::span<const int64_t> words, std::vector<BlockTable>& tables);
    // Row r's input embedding: wte's row of its token, or its extra row.
    const float* embedding(int64_t r, const float* wte, int64_t vocab_size, int64_t C) const;
};

// Causal attention of every row of `b` (grouped-query: NKV kv heads for NH query heads of HS):
// the keys and values of its rows (packed [q | k | v] rows of qkv, `ld` apart) are first stored
// at their positions in `kv` (layer `layer`), then each row's queries attend to its sequence's
// positions up to its own, read through the block table. out [rows, NH HS]. Each output is one
// fixed sequence of operations over its row's query and its sequence's cached keys and values:
// the same bits whatever the other rows, and whether its sequence's earlier positions came in
// this call or an earlier one.
// `prepare(q, k, pos)`, when given, rewrites in place the queries of one kv head's group (NH /
// NKV heads of HS, one after the other, at q) and that head's key (at k) of a row at position
// `pos` (rotary positions), before the key is stored; in qkv's rows or in a copy, on any thread,
// for different rows and heads at once.
using RowHeadPrepare = std::function<void(float* q, float* k, int64_t pos)>;
void attend_rows(float* out, float* qkv, int64_t ld, const RowBatch& b, KvPool& kv, int layer,
                 int64_t NH, int64_t NKV, int64_t HS, const RowHeadPrepare& prepare = {});

}  // namespace weft::model
