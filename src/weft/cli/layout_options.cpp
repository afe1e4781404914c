#include "weft/cli/layout_options.hpp"

#include <CLI/CLI.hpp>
#include <utility>

#include "weft/cli/flag_checks.hpp"
#include "weft/core/error.hpp"

namespace weft::cli {

void add_shape_options(CLI::App* c, const ShapeOverrides& shape) {
    c->add_option("--n-layer", *shape.n_layer, "Override the preset's number of blocks");
    c->add_option("--n-head", *shape.n_head, "Override the preset's attention heads");
    c->add_option("--n-embd", *shape.n_embd, "Override the preset's width");
    require_counts(c, {"--n-layer", "--n-head", "--n-embd"});
}

void add_layout_options(CLI::App* c, Layout& layout, std::string& pp_layers,
                        int64_t& micro_batch_size) {
    c->add_option("--micro-batch-size", micro_batch_size,
                  "Sequences per forward pass on each rank (default: --batch-size / dp); the "
                  "rest is gradient accumulation, or the pipeline's micro-batches");
    c->add_option("--dp", layout.dp, "Data-parallel degree (0: world size / other degrees)");
    c->add_option("--zero", layout.zero,
                  "ZeRO stage over the data-parallel ranks: 0 (replicated), 1 (optimizer states "
                  "sharded), 2 (and gradients), 3 (and parameters)")
        ->capture_default_str();
    c->add_option("--tp", layout.tp,
                  "Tensor-parallel degree: every block split across this many ranks (Megatron)")
        ->capture_default_str();
    c->add_flag("--sequence-parallel", layout.sequence_parallel,
                "With --tp: LayerNorm and residual regions split along the sequence "
                "(Korthikanti et al.)");
    c->add_option("--pp", layout.pp, "Pipeline-parallel degree: stages of consecutive layers")
        ->capture_default_str();
    // Parsed here, once: the layout holds the schedule as an enum.
    c->add_option_function<std::string>(
         "--pp-schedule",
         [&layout](const std::string& v) { layout.pp_schedule = parse_pp_schedule_flag(v); },
         "Pipeline schedule: gpipe, 1f1b, interleaved (with --vpp), or the zero-bubble zb-h1 "
         "and zb-v (backward split into input and weight gradients; zb-v two chunks a rank "
         "in a V)")
        ->default_str(std::string(format_schedule_kind(layout.pp_schedule)));
    c->add_option("--vpp", layout.vpp,
                  "Virtual stages (model chunks) per pipeline rank, for --pp-schedule interleaved")
        ->capture_default_str();
    c->add_option("--pp-layers", pp_layers,
                  "Layers per pipeline chunk, comma-separated in model order (pp x vpp numbers "
                  "adding up to the layer count); default: an even split")
        ->capture_default_str();
    c->add_flag_callback(
        "--recompute", [&layout] { layout.recompute = Recompute::full; },
        "Keep only each layer's input from forward and re-run its forward in backward");
    c->add_option("--cp", layout.cp,
                  "Context-parallel degree: every sequence split over this many ranks (zigzag "
                  "chunks; gradients reduced over cp x dp)")
        ->capture_default_str();
    c->add_option_function<std::string>(
         "--cp-kind", [&layout](const std::string& v) { layout.cp_kind = parse_cp_kind(v); },
         "How --cp splits attention: ring (K/V blocks rotate around the cp ranks), ulysses "
         "(all-to-all over heads; heads and kv heads must divide by cp) or hybrid (Ulysses in "
         "groups of --cp-ulysses ranks, the ring across the groups)")
        ->default_str(std::string(cp_kind_name(layout.cp_kind)));
    c->add_option("--cp-ulysses", layout.cp_ulysses,
                  "With --cp-kind hybrid: ranks of each Ulysses group (consecutive cp ranks; it "
                  "must divide --cp, and heads and kv heads must divide by it)");
    c->add_flag("--ring-bidirectional", layout.ring_bidirectional,
                "With --cp-kind ring: TokenRing, query blocks travel one way round the ring and "
                "partial results come back the other, keys and values stay home");
    c->add_option("--ep", layout.ep,
                  "Expert-parallel degree, folded over the data-parallel ranks: experts split "
                  "over ep consecutive dp ranks (ep divides dp; mixture-of-experts models)")
        ->capture_default_str();
    require_counts(c, {"--micro-batch-size", "--cp-ulysses"});
    group_options(c, "Parallel layout",
                  {"--micro-batch-size", "--dp", "--zero", "--tp", "--sequence-parallel", "--pp",
                   "--pp-schedule", "--vpp", "--pp-layers", "--recompute", "--cp", "--cp-kind",
                   "--cp-ulysses", "--ring-bidirectional", "--ep"});
}

void add_data_format_option(CLI::App* c, data::TokenFormat& format) {
    c->add_option_function<std::string>(
         "--data-format", [&format](const std::string& v) { format = data::parse_token_format(v); },
         "Token files' layout: llmc (llm.c's header, as `weft prepare` writes) or raw (nanoGPT's "
         "headerless uint16 tokens)")
        ->default_str("llmc");
}

void group_options(CLI::App* c, const char* heading, std::initializer_list<const char*> flags) {
    for (const char* f : flags) {
        CLI::Option* o = c->get_option_no_throw(f);
        WEFT_CHECK(o, "internal: {} has no flag {} to put under '{}'", c->get_name(), f, heading);
        o->group(heading);
    }
}

void check_layout_supported(const Layout& layout, bool context_parallel, bool expert_parallel) {
    WEFT_CHECK(expert_parallel || layout.ep == 1,
               "--ep {}: this kind of parallelism is not supported yet by this command (only 1; "
               "weft train runs it)",
               layout.ep);
    WEFT_CHECK(context_parallel || layout.cp == 1,
               "--cp {}: this kind of parallelism is not supported yet by this command (only "
               "1; weft train runs it)",
               layout.cp);
}

}  // namespace weft::cli
