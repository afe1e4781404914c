#pragma once
// The flags that several commands share, each described once: the model's shape overrides and how
// the model and the batch are split over the ranks (`weft train`, `weft bench train`), the token
// files' format (`weft train`, `weft eval`); and the headings that order their long --help.
#include <cstdint>
#include <initializer_list>
#include <string>

#include "weft/core/layout.hpp"
#include "weft/data/token_file.hpp"

namespace CLI {
class App;
}

namespace weft::cli {

struct ShapeOverrides {
    int64_t* n_layer;
    int64_t* n_head;
    int64_t* n_embd;
};
void add_shape_options(CLI::App* c, const ShapeOverrides& shape);

// --dp, --zero, --micro-batch-size, --tp, --sequence-parallel, --pp, --pp-schedule, --vpp,
// --pp-layers, --recompute, --cp, --cp-kind and --ep.
void add_layout_options(CLI::App* c, Layout& layout, std::string& pp_layers,
                        int64_t& micro_batch_size);
// --data-format llmc|raw: how the command's token files are read.
void add_data_format_option(CLI::App* c, data::TokenFormat& format);

// Puts the named options of c under one heading of its --help (a flag missing from c is an
// internal error, so that a renamed flag cannot fall out of its heading unseen).
void group_options(CLI::App* c, const char* heading, std::initializer_list<const char*> flags);

// The degrees a command cannot run (cp where it has no context-parallel data path,
// `context_parallel` false; ep likewise with `expert_parallel`) are an error naming the flag.
void check_layout_supported(const Layout& layout, bool context_parallel = false,
                            bool expert_parallel = false);

}  // namespace weft::cli
