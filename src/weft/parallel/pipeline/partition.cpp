#include "weft/parallel/pipeline/partition.hpp"

#include <fmt/ranges.h>

#include <charconv>

#include "weft/core/error.hpp"
#include "weft/model/family.hpp"

namespace weft::pipeline {

std::vector<int> Partition::chunks_of(int rank) const {
    return rank_chunks(rank, pp, vpp, vee);
}

std::vector<bool> Partition::units_of(int rank, const model::ModelConfig& cfg) const {
    std::vector<bool> held(size_t(n_layer + 2), false);
    for (int c : chunks_of(rank)) {
        const model::LayerSpan span{first[c], count[c], c == chunks() - 1};
        for (int u : model::units_of_span(cfg, span))
            // After an empty first chunk (the embedding alone) the next one starts at layer 0
            // too; the embeddings stay with chunk 0 (and a tied head).
            if (u != 0 || c == 0 || first[c] != 0 || (span.head && cfg.tie_embeddings))
                held[size_t(u)] = true;
    }
    return held;
}

Partition partition_layers(int n_layer, int pp, int vpp, const std::string& layers, bool vee,
                           bool empty_ends) {
    WEFT_CHECK(!vee || vpp == 2, "internal: a V of chunks needs vpp 2, got {}", vpp);
    Partition p{pp, vpp, n_layer, {}, {}, vee};
    const int chunks = pp * vpp;
    // Every chunk holds at least one layer (but the ends, when they may be empty): no
    // --pp-layers can help here.
    const int most = n_layer + (empty_ends && chunks > 1 ? 2 : 0);
    WEFT_CHECK(chunks <= most,
               "pp {} x vpp {} = {} pipeline chunks cannot split the model's {} layers (each chunk "
               "holds at least one); lower --pp or --vpp so that pp x vpp is at most {}",
               pp, vpp, chunks, n_layer, most);
    if (layers.empty()) {
        WEFT_CHECK(n_layer % chunks == 0,
                   "{} layers do not split evenly into pp {} x vpp {} = {} pipeline chunks; pass "
                   "--pp-layers with {} counts adding up to {} (e.g. uneven stages), or change "
                   "--pp / --vpp",
                   n_layer, pp, vpp, chunks, chunks, n_layer);
        p.count.assign(size_t(chunks), n_layer / chunks);
    } else {
        size_t pos = 0;
        while (pos <= layers.size()) {
            const size_t end = std::min(layers.find(',', pos), layers.size());
            int v = 0;
            const char* b = layers.data() + pos;
            const char* e = layers.data() + end;
            auto r = std::from_chars(b, e, v);
            // Only an end may be empty, and only where allowed; the list's length is checked
            // below, so the last entry is taken as the last chunk here.
            const bool end_chunk = p.count.empty() || end == layers.size();
            WEFT_CHECK(r.ec == std::errc() && r.ptr == e && (v >= 1 || (v == 0 && empty_ends)),
                       "--pp-layers '{}': '{}' is not a {} layer count", layers, std::string(b, e),
                       empty_ends ? "non-negative" : "positive");
            WEFT_CHECK(v >= 1 || end_chunk,
                       "--pp-layers '{}': a chunk between the first and the last holds no layer; "
                       "only the first (the embedding alone) or the last (the head alone) may",
                       layers);
            p.count.push_back(v);
            pos = end + 1;
        }
        int sum = 0;
        for (int c : p.count) sum += c;
        WEFT_CHECK(int(p.count.size()) == chunks && sum == n_layer,
                   "--pp-layers '{}' gives {} chunks of {} layers in all; expected pp {} x vpp {} "
                   "= {} chunks adding up to the model's {} layers",
                   layers, p.count.size(), sum, pp, vpp, chunks, n_layer);
    }
    int next = 0;
    for (int c : p.count) {
        p.first.push_back(next);
        next += c;
    }
    return p;
}

Partition partition_layers(int n_layer, const Layout& l, const std::string& layers,
                           bool empty_ends) {
    return partition_layers(n_layer, l.pp, l.vpp, layers, places_in_vee(l.pp_schedule), empty_ends);
}

}  // namespace weft::pipeline
