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
        for (int u : model::units_of_span(cfg, span)) held[size_t(u)] = true;
    }
    return held;
}

Partition partition_layers(int n_layer, int pp, int vpp, const std::string& layers, bool vee) {
    WEFT_CHECK(!vee || vpp == 2, "internal: a V of chunks needs vpp 2, got {}", vpp);
    Partition p{pp, vpp, n_layer, {}, {}, vee};
    const int chunks = pp * vpp;
    // Every chunk holds at least one layer: no --pp-layers can help here.
    WEFT_CHECK(chunks <= n_layer,
               "pp {} x vpp {} = {} pipeline chunks cannot split the model's {} layers (each chunk "
               "holds at least one); lower --pp or --vpp so that pp x vpp is at most {}",
               pp, vpp, chunks, n_layer, n_layer);
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
            WEFT_CHECK(r.ec == std::errc() && r.ptr == e && v >= 1,
                       "--pp-layers '{}': '{}' is not a positive layer count", layers,
                       std::string(b, e));
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

Partition partition_layers(int n_layer, const Layout& l, const std::string& layers) {
    return partition_layers(n_layer, l.pp, l.vpp, layers, places_in_vee(l.pp_schedule));
}

}  // namespace weft::pipeline
