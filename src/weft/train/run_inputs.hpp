#pragma once
// What a training run starts from: its model (a preset, a Hugging Face directory or the checkpoint
// it resumes), that checkpoint, and its token files. Found and checked on every rank before any
// work or any file is written, then loaded into the rank's TrainState.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "weft/data/token_file.hpp"
#include "weft/model/config.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/train/options.hpp"
#include "weft/train/train_state.hpp"

namespace weft::train {

struct RunInputs {
    model::ModelConfig cfg;
    std::string model_name;  // what errors call the model: the preset, or where it came from
    std::optional<CheckpointInfo> resume_from;
    int64_t start_step = 0;
    data::TokenFile train;
    std::optional<data::TokenFile> val;  // with --val-data (or the training file's _val twin)
    // --pack documents: where the training file's documents start (its document index).
    std::vector<int64_t> train_documents;
};

// Opens and checks everything the run reads: the checkpoint to resume (a damaged newest one is
// passed over, with a warning printed on `root`), the model and every flag that would change it,
// the expert-parallel split, and the token files against the model's vocabulary and --seq-len.
RunInputs open_run_inputs(const TrainOptions& o, bool root);

// The parameters (and, resuming, the AdamW moments and the model's routing state) of `st`: from
// the checkpoint, the Hugging Face directory, or the seed.
void load_run_start(TrainState& st, const RunInputs& in, const TrainOptions& o);

}  // namespace weft::train
