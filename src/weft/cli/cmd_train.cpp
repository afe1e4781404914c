#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <memory>

#include "weft/cli/commands.hpp"
#include "weft/cli/flag_checks.hpp"
#include "weft/cli/layout_options.hpp"
#include "weft/cli/output_paths.hpp"
#include "weft/core/error.hpp"
#include "weft/model/config.hpp"
#include "weft/optim/registry.hpp"
#include "weft/train/ppd_train.hpp"
#include "weft/train/trainer.hpp"

namespace weft::cli {

void add_train_command(CLI::App& app) {
    auto o = std::make_shared<train::TrainOptions>();
    CLI::App* c = app.add_subcommand("train", "Train a model on a token file");
    c->add_option("--config",
                  "TOML file whose keys are these flags' names (underscores or "
                  "dashes); flags given on the command line win");
    c->add_option("--model", o->model,
                  fmt::format("Model preset: {}", fmt::join(model::model_preset_names(), ", ")))
        ->capture_default_str();
    add_shape_options(c, {&o->n_layer, &o->n_head, &o->n_embd});
    c->add_option("--n-positions", o->n_positions, "Override the preset's maximum sequence length");
    require_counts(c, {"--n-positions"});
    c->add_option("--model-dir", o->model_dir,
                  "Start from a Hugging Face model directory (GPT2LMHeadModel, "
                  "LlamaForCausalLM, MixtralForCausalLM or Qwen2ForCausalLM: config.json, "
                  "model.safetensors or its "
                  "sharded index) instead "
                  "of a fresh initialisation; its config.json gives the model, and --model or a "
                  "shape flag that asks for another is refused");
    c->add_option("--moe-aux-loss-coef", o->moe_aux_loss_coef,
                  "Mixture of experts: load-balance loss coefficient per layer (0: off; default: "
                  "the model's)");
    c->add_option("--moe-z-loss-coef", o->moe_z_loss_coef,
                  "Mixture of experts: router z-loss coefficient per layer (0: off; default: the "
                  "model's)");
    c->add_option("--moe-capacity-factor", o->moe_capacity_factor,
                  "Mixture of experts: each expert takes at most this x tokens x top-k / experts "
                  "slots of a micro-batch, dropping the lowest-scored (0: dropless, the default)");
    c->add_option("--moe-router-bias-update-rate", o->moe_router_bias_update_rate,
                  "Mixture of experts: aux-loss-free balancing (DeepSeek-V3): a per-expert bias "
                  "added to the router's scores for the top-k choice only, moved by this much "
                  "towards balance after each step, from the batch's counts over the ranks; "
                  "saved in checkpoints (0: off, the default)");
    c->add_option("--data", o->data, "Training token file (from `weft prepare`, llm.c or nanoGPT)")
        ->capture_default_str();
    c->add_option(
        "--val-data", o->val_data,
        "Validation token file (default: --data with _train replaced by _val, if present)");
    add_data_format_option(c, o->data_format);
    c->add_option("--out", o->out, "Run directory: metrics.jsonl and checkpoints/")
        ->capture_default_str();
    c->add_option("--steps", o->steps, "Optimizer steps to train in all")->capture_default_str();
    c->add_option("--batch-size", o->batch_size, "Global batch: sequences per optimizer step")
        ->capture_default_str();
    c->add_option("--seq-len", o->seq_len, "Tokens per sequence")->capture_default_str();
    c->add_option("--optimizer", o->optim.optimizer,
                  fmt::format("Optimizer: {} (docs/memory.md)", optim::optimizer_names()))
        ->capture_default_str();
    c->add_option("--lr", o->optim.lr, "Peak learning rate")->capture_default_str();
    c->add_option("--lr-schedule", o->optim.lr_schedule, "After warm-up: cosine or constant")
        ->capture_default_str();
    c->add_option("--min-lr-ratio", o->optim.min_lr_ratio,
                  "Cosine decays to lr times this at the last step")
        ->capture_default_str();
    c->add_option("--warmup", o->optim.warmup, "Linear warm-up steps")->capture_default_str();
    c->add_option("--weight-decay", o->optim.weight_decay,
                  "Decoupled weight decay of every optimizer (matrices and embeddings only)")
        ->capture_default_str();
    c->add_option("--beta1", o->optim.beta1, "beta1 (default: the optimizer's, 0.9)");
    c->add_option("--beta2", o->optim.beta2,
                  "beta2 (default: the optimizer's, AdamW 0.95, Lion 0.99)");
    c->add_option("--eps", o->optim.eps, "AdamW epsilon")->capture_default_str();
    c->add_option("--mezo-eps", o->optim.mezo_eps, "MeZO's perturbation scale")
        ->capture_default_str();
    c->add_option("--grad-clip", o->optim.grad_clip, "Clip the global gradient norm (0: off)")
        ->capture_default_str();
    c->add_option("--seed", o->seed, "Seed of the initialisation and the sample order")
        ->capture_default_str();
    c->add_flag("--sequential", o->sequential,
                "Read the data in order (llm.c): row r of batch b is tokens [(b*B+r)*T, +T+1)");
    c->add_option("--pack", o->pack,
                  "none: one sequence a row; documents: attention and positions restart at each "
                  "document of the token file's index (docs/long_context.md)")
        ->capture_default_str();
    c->add_flag("--balance", o->balance,
                "With --pack documents: each step, spread the documents over the data-parallel "
                "ranks (under TokenRing or the hybrid's ring, over every (dp, cp) rank, a short "
                "document whole on one cp rank; the plain ring splits each row per document) so "
                "that their attention work is even, padding a row only where the predicted step "
                "gains (docs/long_context.md)");
    c->add_option("--eval-every", o->eval_every, "Validation loss every N steps (0: at the end)")
        ->capture_default_str();
    c->add_option("--eval-batches", o->eval_batches, "Batches of the validation file to evaluate")
        ->capture_default_str();
    c->add_option("--save-every", o->save_every, "Checkpoint every N steps (0: at the end)")
        ->capture_default_str();
    c->add_option("--keep-checkpoints", o->keep_checkpoints,
                  "Checkpoints kept in the run dir (at least 2 are kept, so that a damaged "
                  "newest one leaves one to resume from)")
        ->capture_default_str();
    c->add_flag("--async-checkpoint", o->async_checkpoint,
                "Write checkpoints on a background thread while training goes on: the state is "
                "copied to a staging buffer (counted in the memory estimate) between steps, and "
                "the checkpoint is committed at a later step boundary once every rank's shard is "
                "on disk; the files are the same as a synchronous save's");
    c->add_flag(
        "--resume", o->resume,
        "Continue from the run directory's latest checkpoint (start afresh if it has none)");
    c->add_option("--exit-after", o->exit_after,
                  "Stop after this many steps of this invocation, with a checkpoint, so that a "
                  "later --resume continues (0: run to --steps)")
        ->capture_default_str();
    add_layout_options(c, o->layout, o->pp_layers, o->micro_batch_size);
    c->add_option("--dtype", o->dtype,
                  "Matrix products in fp32, or bf16 with fp32 accumulation (master weights, "
                  "optimizer states, LayerNorm, softmax and loss stay fp32); bf16 also sends "
                  "tensor-parallel activations and pipeline messages as bf16")
        ->capture_default_str();
    c->add_option("--grad-reduce-dtype", o->grad_reduce_dtype,
                  "Data-parallel gradient reduction on the wire: fp32, or bf16 (summed in fp32 "
                  "on the receiving rank)")
        ->capture_default_str();
    c->add_option("--grad-dtype", o->grad_dtype,
                  "Gradients of the transformer blocks' matrices: fp32, or bf16 (rounded once "
                  "reduced, as the bf16 working copy stores them; default bf16 under --dtype bf16 "
                  "with --offload, which then keeps the fp32 master weights on disk, else "
                  "fp32)");
    c->add_option("--bucket-mb", o->bucket_mb,
                  "Gradients are reduced in buckets of at least this many MiB, during backward")
        ->capture_default_str();
    c->add_option(
        "--offload", o->offload,
        "optimizer: keep the optimizer's state (any --optimizer's; mezo, which has none, its fp32 "
        "master under --dtype bf16) in files under --offload-dir and stream it "
        "through a bounded pool at each step (io_uring, direct I/O); weights and "
        "gradients stay in memory, and the run's numbers are bitwise the same. "
        "optimizer+params: the working weights and gradients too, a layer read ahead and "
        "its gradients written behind (ZeRO-3 style)");
    c->add_option("--offload-dir", o->offload_dir,
                  "Existing directory for --offload's files (scratch: removed at the end; a "
                  "checkpoint copies the state in)");
    c->add_option("--offload-group-mb", o->offload_group_mb,
                  "--offload streams the state in groups of as many elements as this many MiB "
                  "of fp32 (per state array)")
        ->capture_default_str();
    require_together(c, "--offload", "--offload-dir");
    c->add_option("--comm-timeout", o->comm_timeout,
                  "Seconds a rank may wait in one communication call before the job ends naming "
                  "the missing rank (0: $WEFT_COMM_TIMEOUT, else 300)")
        ->capture_default_str();
    c->add_option("--log-every", o->log_every, "Progress line every N steps")
        ->capture_default_str();
    c->add_option("--threads", o->threads,
                  "OpenMP threads per rank (0: OMP_NUM_THREADS, else cores / ranks on the node)")
        ->capture_default_str();
    c->add_option("--peak-gflops", o->peak_gflops,
                  "Peak GFLOP/s for MFU (0: measure a GEMM at start)")
        ->capture_default_str();
    c->add_option("--trace", o->trace,
                  "Write the measured timeline of the last step as Chrome-trace JSON (one track "
                  "per rank; open in Perfetto): with --pp the pipeline schedule's forwards, "
                  "backwards, sends and receives; otherwise every communication operation of "
                  "the step (dp, tp, cp, ep: group, operation, bytes, peer)");
    c->add_option("--inject-delay", o->inject_delay,
                  "Testing aid: world rank RANK sleeps MS milliseconds at the start of every step, "
                  "so that its peers wait for it and slow-rank diagnosis names it (RANK:MS)");
    c->add_option("--ppd-tokens", o->ppd_tokens,
                  "Train K prompt tokens of Parallel Prompt Decoding (weft sample --spec ppd) for "
                  "the frozen model of --base, distilled from its own next-token choices; only "
                  "K x n_embd floats are trained (docs/decoding.md)");
    c->add_option("--base", o->ppd_base, "--ppd-tokens: the model's run or checkpoint directory");
    c->add_option("--ppd-target", o->ppd_target,
                  "--ppd-tokens: each prompt's target is the base model's argmax, or a sample of "
                  "its distribution (the soft targets' gradient, in expectation)")
        ->capture_default_str();
    group_options(c, "Parallel Prompt Decoding", {"--ppd-tokens", "--base", "--ppd-target"});
    c->add_option("--teacher", o->teacher,
                  "Distill from this frozen model (a run, checkpoint or Hugging Face directory "
                  "with the same tokenizer): the loss becomes (1 - a) CE + a t^2 KL(teacher || "
                  "model) at temperature t, over every token (docs/decoding.md)");
    c->add_option("--distill-weight", o->distill_weight,
                  "--teacher: a, the KL's share of the loss, 0 .. 1 (default 1: the teacher's "
                  "distributions alone)");
    c->add_option("--distill-temperature", o->distill_temperature,
                  "--teacher: t, the softmax temperature of both distributions (default 1)");
    group_options(c, "Distillation", {"--teacher", "--distill-weight", "--distill-temperature"});
    group_options(c, "Model",
                  {"--model", "--n-layer", "--n-head", "--n-embd", "--n-positions", "--model-dir",
                   "--moe-aux-loss-coef", "--moe-z-loss-coef", "--moe-capacity-factor",
                   "--moe-router-bias-update-rate"});
    group_options(c, "Data and run",
                  {"--data", "--val-data", "--data-format", "--out", "--steps", "--batch-size",
                   "--seq-len", "--seed", "--sequential", "--pack", "--balance"});
    group_options(c, "Optimizer",
                  {"--optimizer", "--lr", "--lr-schedule", "--min-lr-ratio", "--warmup",
                   "--weight-decay", "--beta1", "--beta2", "--eps", "--mezo-eps", "--grad-clip"});
    group_options(c, "Evaluation and checkpoints",
                  {"--eval-every", "--eval-batches", "--save-every", "--keep-checkpoints",
                   "--async-checkpoint", "--resume", "--exit-after"});
    group_options(
        c, "Communication and precision",
        {"--bucket-mb", "--comm-timeout", "--dtype", "--grad-reduce-dtype", "--grad-dtype"});
    group_options(c, "Memory", {"--offload", "--offload-dir", "--offload-group-mb"});
    group_options(c, "Progress and measurement",
                  {"--log-every", "--threads", "--peak-gflops", "--trace", "--inject-delay"});
    c->callback([o, c] {
        o->model_given = c->count("--model") > 0;
        WEFT_CHECK(o->ppd_tokens > 0 || o->ppd_base.empty(),
                   "--base {} is for --ppd-tokens K (prompt tokens for that model)",
                   o->ppd_base.string());
        for (const char* flag : {"--distill-weight", "--distill-temperature"})
            WEFT_CHECK(c->count(flag) == 0 || !o->teacher.empty(),
                       "{} is for --teacher RUN (distilling from that model)", flag);
        WEFT_CHECK(o->ppd_tokens == 0 || o->teacher.empty(),
                   "--teacher {} is for training a model; --ppd-tokens distills from --base",
                   o->teacher.string());
        if (o->ppd_tokens != 0) {
            check_output_paths({{o->out, "--out", true}});
            train::run_ppd_training(*o);
            return;
        }
        const optim::OptimizerSpec& spec = optim::find_optimizer(o->optim.optimizer);
        if (c->count("--beta1") == 0) o->optim.beta1 = spec.beta1;
        if (c->count("--beta2") == 0) o->optim.beta2 = spec.beta2;
        check_layout_supported(o->layout, /*context_parallel=*/true, /*expert_parallel=*/true);
        check_output_paths({{o->out, "--out", true}, {o->trace, "--trace", false}});
        train::run_training(*o);
    });
}

}  // namespace weft::cli
