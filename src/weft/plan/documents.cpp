#include "weft/plan/documents.hpp"

#include <algorithm>
#include <filesystem>

#include "weft/core/error.hpp"
#include "weft/data/balance.hpp"
#include "weft/data/doc_index.hpp"
#include "weft/data/doc_zigzag.hpp"
#include "weft/data/loader.hpp"
#include "weft/data/synthetic.hpp"
#include "weft/data/token_file.hpp"

namespace weft::plan {

DocumentSource document_source(const std::string& spec, int64_t seq_len, int64_t tokens,
                               int64_t max_len) {
    DocumentSource src;
    src.seq_len = seq_len;
    if (spec.ends_with(".bin")) {
        const data::TokenFile file = data::TokenFile::open(spec);
        src.starts = data::read_doc_index(data::doc_index_path(spec), file);
        src.tokens = file.size();
    } else {
        const data::LengthDistribution d =
            data::parse_length_distribution(spec, max_len, "--doc-lengths");
        // Draw documents until the corpus holds `tokens`: the lengths' mean is not known for
        // every distribution, so in rounds.
        src.starts = {0};
        for (uint64_t round = 0; src.tokens < tokens; ++round)
            for (int64_t n : data::synthetic_lengths(d, 1024, 1 + round)) {
                src.tokens += n;
                src.starts.push_back(src.tokens);
            }
        src.starts.pop_back();
    }
    WEFT_CHECK(src.tokens - 1 >= seq_len,
               "--doc-lengths {}: {} tokens, too few for one window of --seq-len {}", spec,
               src.tokens, seq_len);
    return src;
}

DocumentMix document_mix(const DocumentSource& src, int64_t global_batch, int dp, int64_t micro,
                         int ring, bool per_document, data::StepCost cost) {
    const int64_t T = src.seq_len, windows = (src.tokens - 1) / T;
    const data::DocumentRows docs(src.starts, T);
    double squares = 0, busiest = 0, mean = 0, rows = 0, static_busiest = 0;
    for (int64_t step = 0; step < src.steps; ++step) {
        std::vector<data::Row> batch;
        for (int64_t r = 0; r < global_batch; ++r) {
            // The loader's window (DataLoader::window) without a token file to hold.
            const int64_t g = step * global_batch + r;
            batch.push_back(docs.window(
                data::shuffled_window(g % windows, windows, src.seed, g / windows) * T));
        }
        // The per-document ring shares each row itself: documents placed over dp only.
        const int place = per_document ? 1 : ring;
        auto work = [&](const data::RankRows& rows) {
            return per_document ? data::rank_work_per_document(rows, ring) : data::rank_work(rows);
        };
        const data::RankRows fixed = data::static_rows(batch, dp, place);
        const data::RankWork s = work(fixed);
        const data::RankRows layout = src.balance && dp * place > 1
                                          ? data::balance_rows(batch, dp, T, micro, place, cost)
                                          : fixed;
        const data::RankWork w = work(layout);
        for (double x : s.squares) squares += x;
        busiest += w.max_squares();
        static_busiest += s.max_squares();
        rows += double(layout.rows_per_rank);
    }
    const double steps = double(src.steps);
    mean = squares / steps / (dp * ring);
    DocumentMix m;
    m.attention_kept = squares / steps / (double(global_batch) * double(T) * double(T));
    m.busiest_squares = busiest / steps;
    m.imbalance = m.busiest_squares / mean;
    m.static_imbalance = static_busiest / steps / mean;
    m.rows = rows / steps / double(global_batch / dp);
    return m;
}

}  // namespace weft::plan
