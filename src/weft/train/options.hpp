#pragma once
// Everything a training run is told, from the config file and the command line.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "weft/core/layout.hpp"
#include "weft/data/token_file.hpp"
#include "weft/model/config.hpp"
#include "weft/offload/streamed_state.hpp"
#include "weft/optim/optimizer.hpp"

namespace weft::train {

// A preset with its shape overridden where a value is non-zero.
model::ModelConfig reshaped_preset(const std::string& preset, int64_t n_layer, int64_t n_head,
                                   int64_t n_embd, int64_t n_positions);

// An error when `asked` (what `flag` asks for) is another architecture than `cfg`, the model
// that `holder` (a checkpoint, a config.json) gives; `source` names what is being done. The
// --moe-* training coefficients may differ.
void check_same_model(model::ModelConfig asked, const model::ModelConfig& cfg,
                      const std::string& source, const std::string& flag,
                      const std::string& holder);

// The flags `weft train` and `weft bench train` both take that size a run: --steps, --batch-size
// and --seq-len at least 1, --threads and --peak-gflops (0: choose, measure) not negative,
// --threads at most the node's cores.
void check_run_sizes(int64_t steps, int64_t batch_size, int64_t seq_len, int threads,
                     double peak_gflops);

// --inject-delay RANK:MS, a testing aid for slow-rank diagnosis: world rank RANK sleeps MS
// milliseconds at the start of every step, so its peers wait for it in the step's collectives.
struct InjectedDelay {
    int rank = -1;  // -1: none
    int64_t ms = 0;
};
// Parses the flag's value ("" is none). world_size 0: the world is not known yet (only the form
// and the signs are checked). Errors name the value and what was expected.
InjectedDelay parse_inject_delay(const std::string& value, int world_size);

struct TrainOptions {
    // Model: a preset, optionally reshaped; or a Hugging Face directory to start from.
    std::string model = "tiny";
    bool model_given = false;  // --model was on the command line (or in --config), not defaulted
    int64_t n_layer = 0, n_head = 0, n_embd = 0, n_positions = 0;  // 0: the preset's
    std::filesystem::path model_dir;
    // Mixture of experts: override the model's router losses and capacity (unset: the model's).
    std::optional<double> moe_aux_loss_coef, moe_z_loss_coef, moe_capacity_factor;
    std::optional<double> moe_router_bias_update_rate;

    std::filesystem::path data = "data/tinyshakespeare_train.bin";
    std::filesystem::path val_data;  // default: data with _train replaced by _val, if it exists
    data::TokenFormat data_format = data::TokenFormat::llmc;  // of both files
    std::filesystem::path out = "runs/default";

    int64_t steps = 100;
    int64_t batch_size = 8;        // global batch, sequences per optimizer step
    int64_t micro_batch_size = 0;  // sequences per forward pass; 0: batch_size / dp
    int64_t seq_len = 256;
    uint64_t seed = 1337;
    bool sequential = false;
    // none: one sequence a row, attention across whatever documents it holds; documents: the
    // rows' documents apart (attention and positions), from the token file's document index.
    std::string pack = "none";
    // --balance: each step's documents balanced over the dp ranks (data/balance.hpp).
    bool balance = false;

    optim::OptimConfig optim;

    int64_t eval_every = 0;  // 0: only at the end
    int64_t eval_batches = 8;
    int64_t save_every = 0;  // 0: only at the end
    int64_t keep_checkpoints = 3;
    bool resume = false;
    bool async_checkpoint = false;  // write checkpoints on a thread while training goes on
    int64_t exit_after = 0;  // stop (with a checkpoint) after this many steps of this run; 0: off
    int64_t log_every = 1;
    int threads = 0;  // OpenMP threads per rank; 0: OMP_NUM_THREADS or cores / ranks on the node
    double peak_gflops = 0;  // for MFU; 0: measured at start

    Layout layout;
    double bucket_mb = 25;    // data-parallel gradient bucket, MiB of fp32
    double comm_timeout = 0;  // seconds a rank may block in communication; 0: the default
    std::string pp_layers;    // "3,3,2,2": layers per pipeline chunk; empty: as even as possible
    std::filesystem::path trace;  // Chrome-trace JSON of the pipeline's measured timeline

    std::string dtype = "fp32";  // matrix products: fp32, or bf16 with fp32 accumulation
    // What data-parallel gradient reduction puts on the wire: fp32, or bf16 summed in fp32.
    std::string grad_reduce_dtype = "fp32";
    std::string inject_delay;  // RANK:MS, a testing aid (InjectedDelay); empty: none

    // --offload optimizer: AdamW's moments in files under offload_dir, streamed each step in
    // groups of offload_group_mb MiB per moment (train_state.hpp's OffloadOptions);
    // optimizer+params: the working weights and gradients in files there too.
    std::string offload;  // "" | optimizer | optimizer+params
    std::filesystem::path offload_dir;
    double offload_group_mb = offload::kDefaultGroupMb;
    // --grad-dtype: fp32 | bf16; empty: bf16 under --dtype bf16 with --offload, else fp32.
    std::string grad_dtype;
    // The gradients' dtype once the default is applied.
    std::string resolved_grad_dtype() const;
    // --dtype bf16 --offload optimizer with bf16 gradients: weights and gradients in memory as
    // the bf16 working copy, the fp32 master in the offload files (parallel/working_copy.hpp).
    bool bf16_working_copy() const;
    // --offload optimizer+params: the working copy (bf16, or fp32 with fp32 gradients) in files.
    bool params_offloaded() const;

    // --ppd-tokens K --base RUN: train Parallel Prompt Decoding's K prompt tokens for the frozen
    // model of RUN instead (train/ppd_train.hpp); the targets are the base model's argmax, or
    // draws from its distribution (ppd_target "sample").
    int64_t ppd_tokens = 0;
    std::filesystem::path ppd_base;
    std::string ppd_target = "argmax";

    // --teacher RUN: distill from that frozen model (train/teacher.hpp); the loss is
    // (1 - distill_weight) CE + distill_weight t^2 KL at temperature t = distill_temperature.
    std::filesystem::path teacher;
    float distill_weight = 1.0f;
    float distill_temperature = 1.0f;

    // The model shape after applying preset, overrides and (later) the Hugging Face config.
    model::ModelConfig model_config() const;
    // The first of --model, --n-layer, --n-head, --n-embd and --n-positions that was given, as
    // "--flag value"; empty when none was.
    std::string first_model_flag() const;
    // A checkpoint being resumed or a Hugging Face directory gives the model (`cfg`, whose
    // config `holder` names in errors, and `source` the flag or action): an error when a model
    // flag asks for another architecture.
    void check_model_flags(const model::ModelConfig& cfg, const std::string& source,
                           const std::string& holder) const;
    std::filesystem::path val_path() const;
    // The --moe-* overrides applied to `cfg` (the preset's, the checkpoint's or the Hugging Face
    // directory's, which errors call `name`); an error naming the flag when the model has no
    // experts.
    void apply_moe_overrides(model::ModelConfig& cfg, const std::string& name) const;
    // Checks every value; errors name the flag and what was expected.
    void validate() const;
};

// --grad-dtype bf16 (and the working copy it makes under --offload optimizer, or that
// --offload optimizer+params makes) against the resolved layout and the model: one error naming
// what is not supported.
void check_bf16_grads(const TrainOptions& o, const Layout& l, const model::ModelConfig& cfg);

}  // namespace weft::train
