#include "weft/train/run_inputs.hpp"

#include <fmt/format.h>

#include "weft/ckpt/checkpoint_dir.hpp"
#include "weft/ckpt/manifest.hpp"
#include "weft/core/error.hpp"
#include "weft/data/doc_index.hpp"
#include "weft/data/loader.hpp"
#include "weft/model/state_io.hpp"
#include "weft/train/state_checkpoint.hpp"

namespace weft::train {

namespace {

namespace fs = std::filesystem;

// The sample order is a function of (seed, step, row of the global batch): resuming with another
// seed, batch, sequence length or order would silently train on other samples than the
// interrupted run would have.
void check_resume_settings(const CheckpointInfo& ck, const TrainOptions& o) {
    const nlohmann::json& state = ck.state;
    auto same = [&](const char* key, const auto& now, const char* flag,
                    const char* what = "the sample order") {
        if (!state.contains(key)) return;
        std::decay_t<decltype(now)> then;
        try {
            then = state[key].get<std::decay_t<decltype(now)>>();
        } catch (const nlohmann::json::exception&) {
            fail("{}: run.{} is {} ({}), expected a value of {} like {}",
                 (ck.dir / ckpt::kManifestFile).string(), key, state[key].dump(),
                 state[key].type_name(), flag, nlohmann::json(now).dump());
        }
        WEFT_CHECK(then == now,
                   "resuming with {} {} but the checkpoint was trained with {}; {} would change "
                   "(use the same value, or start a new run from the checkpoint's weights)",
                   flag, now, then, what);
    };
    same("seed", o.seed, "--seed");
    same("batch_size", o.batch_size, "--batch-size");
    same("seq_len", o.seq_len, "--seq-len");
    same("sequential", o.sequential, "--sequential");
    same("pack", o.pack, "--pack", "what attention sees");
    // The learning rate of a step depends on these (and, for the cosine, on --steps): a changed
    // schedule would make the resumed steps differ from the uninterrupted run's.
    same("lr", o.optim.lr, "--lr", "the learning-rate schedule");
    same("lr_schedule", o.optim.lr_schedule, "--lr-schedule", "the learning-rate schedule");
    same("warmup", o.optim.warmup, "--warmup", "the learning-rate schedule");
    same("min_lr_ratio", o.optim.min_lr_ratio, "--min-lr-ratio", "the learning-rate schedule");
    if (o.optim.lr_schedule == "cosine")
        same("steps", o.steps, "--steps", "the learning-rate schedule");
    // The optimizer's state is its own: no conversion between optimizers is defined. A
    // checkpoint from before --optimizer holds AdamW's.
    const std::string then = state.value("optimizer", std::string("adamw"));
    WEFT_CHECK(then == o.optim.optimizer,
               "resuming with --optimizer {} but the checkpoint {} holds the state of --optimizer "
               "{}; expected --optimizer {} (or start a new run from its weights)",
               o.optim.optimizer, ck.dir.string(), then, then);
}

// --ep splits experts: a dense model has none, and each ep rank must get as many.
void check_expert_parallel(int ep, const model::ModelConfig& cfg, const std::string& model) {
    if (ep == 1) return;
    WEFT_CHECK(cfg.n_experts > 0,
               "--ep {}: model '{}' is dense (no mixture-of-experts layers), expected --ep 1", ep,
               model);
    WEFT_CHECK(cfg.n_experts % ep == 0,
               "--ep {}: model '{}' has {} experts per layer, not divisible by ep; expected ep "
               "dividing {}",
               ep, model, cfg.n_experts, cfg.n_experts);
}

data::TokenFile open_tokens(const fs::path& path, const TrainOptions& o,
                            const model::ModelConfig& cfg) {
    data::TokenFile file = data::TokenFile::open(path, o.data_format);
    data::check_token_ids(file, cfg.vocab_size);
    return file;
}

}  // namespace

RunInputs open_run_inputs(const TrainOptions& o, bool root) {
    std::optional<CheckpointInfo> resume_from;
    if (o.resume) {
        if (auto point = open_resume_checkpoint(o.out)) {
            if (root && !point->warning.empty()) fmt::print(stderr, "weft: {}\n", point->warning);
            resume_from = std::move(point->ck);
        }
    } else {
        WEFT_CHECK(!ckpt::find_latest(o.out),
                   "run directory {} already holds checkpoints; pass --resume to continue it, or "
                   "choose another --out",
                   o.out.string());
    }
    model::ModelConfig cfg = o.model_config();
    if (resume_from) {
        cfg = resume_from->cfg;
        const std::string source = "resuming " + resume_from->dir.string();
        o.check_model_flags(cfg, source, "the checkpoint");
        // A --model-dir beside --resume names a model too (the first command line's, given
        // again): a missing one or one of another model is refused as --model is, not ignored.
        if (!o.model_dir.empty())
            check_same_model(model::read_hf_model_config(o.model_dir), cfg, source,
                             "--model-dir " + o.model_dir.string(), "the checkpoint");
    } else if (!o.model_dir.empty()) {
        cfg = model::read_hf_model_config(o.model_dir);
        o.check_model_flags(cfg, "--model-dir " + o.model_dir.string(), "its config.json");
    }
    const std::string name = resume_from           ? resume_from->dir.string()
                             : o.model_dir.empty() ? o.model
                                                   : o.model_dir.string();
    o.apply_moe_overrides(cfg, name);
    cfg.validate("model '" + name + "'");
    check_expert_parallel(o.layout.ep, cfg, name);
    // The router's losses and capacity are per micro-batch: moving documents would change them.
    WEFT_CHECK(!o.balance || cfg.n_experts == 0,
               "--balance with model '{}' of {} experts: its router losses and capacity depend "
               "on which tokens share a micro-batch, so balancing would change the loss; "
               "expected a dense model",
               name, cfg.n_experts);
    WEFT_CHECK(o.seq_len <= cfg.n_positions, "--seq-len {} exceeds the model's n_positions {}",
               o.seq_len, cfg.n_positions);

    RunInputs in{cfg,          name, std::move(resume_from), 0, open_tokens(o.data, o, cfg),
                 std::nullopt, {}};
    data::DataLoader(in.train, o.seq_len, o.seed, o.sequential);  // one window at least
    if (o.pack == "documents") {
        const fs::path idx = data::doc_index_path(o.data);
        WEFT_CHECK(fs::exists(idx),
                   "--pack documents: token file '{}' has no document index '{}'; expected one "
                   "written beside it by `weft prepare` (or use --pack none)",
                   o.data.string(), idx.string());
        in.train_documents = data::read_doc_index(idx, in.train);
    }
    if (fs::path vp = o.val_path(); !vp.empty()) {
        in.val = open_tokens(vp, o, cfg);
        // Found now rather than at the first evaluation, after hours of training.
        const int64_t windows = data::DataLoader(*in.val, o.seq_len, 0, true).windows();
        WEFT_CHECK(windows >= o.batch_size,
                   "validation file {} holds {} tokens, fewer than one evaluation batch of {} "
                   "sequences of {} tokens; pass a longer --val-data or a smaller --batch-size",
                   vp.string(), in.val->size(), o.batch_size, o.seq_len);
    }
    if (in.resume_from) {
        check_resume_settings(*in.resume_from, o);
        in.start_step = in.resume_from->state.at("step").get<int64_t>();
    }
    return in;
}

void load_run_start(TrainState& st, const RunInputs& in, const TrainOptions& o) {
    if (in.resume_from) {
        load_state(st, *in.resume_from);
        const nlohmann::json& state = in.resume_from->state;
        if (state.contains("moe_router_bias"))
            st.model().set_router_bias(state.at("moe_router_bias").get<std::vector<float>>(),
                                       in.resume_from->dir.string());
    } else if (!o.model_dir.empty()) {
        load_hf_state(st, o.model_dir);
    } else {
        init_state(st, o.seed);
    }
}

}  // namespace weft::train
