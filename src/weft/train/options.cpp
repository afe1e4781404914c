#include "weft/train/options.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>

#include "weft/core/error.hpp"
#include "weft/offload/state_files.hpp"
#include "weft/optim/registry.hpp"
#include "weft/train/process.hpp"

namespace weft::train {

namespace {
// `c` with its shape overridden where a value is non-zero.
model::ModelConfig reshaped(model::ModelConfig c, int64_t n_layer, int64_t n_head, int64_t n_embd,
                            int64_t n_positions) {
    if (n_layer) c.n_layer = n_layer;
    if (n_head) c.n_head = n_head;
    if (n_embd) c.n_embd = n_embd;
    if (n_positions) c.n_positions = n_positions;
    return c;
}
}  // namespace

model::ModelConfig reshaped_preset(const std::string& preset, int64_t n_layer, int64_t n_head,
                                   int64_t n_embd, int64_t n_positions) {
    return reshaped(model::model_preset(preset), n_layer, n_head, n_embd, n_positions);
}

void check_run_sizes(int64_t steps, int64_t batch_size, int64_t seq_len, int threads,
                     double peak_gflops) {
    WEFT_CHECK(steps >= 1, "--steps must be at least 1, got {}", steps);
    WEFT_CHECK(batch_size >= 1, "--batch-size must be at least 1, got {}", batch_size);
    WEFT_CHECK(seq_len >= 1, "--seq-len must be at least 1, got {}", seq_len);
    WEFT_CHECK(threads >= 0, "--threads must be non-negative, got {}", threads);
    // More threads than cores only slows a run, and OpenMP crashed starting a million of them.
    WEFT_CHECK(threads <= node_cores(),
               "--threads {} is more than the {} cores of this machine; expected 0 (the cores "
               "shared among the ranks on the node) to {}",
               threads, node_cores(), node_cores());
    WEFT_CHECK(peak_gflops >= 0, "--peak-gflops must be non-negative (0: measure), got {}",
               peak_gflops);
}

InjectedDelay parse_inject_delay(const std::string& value, int world_size) {
    InjectedDelay d;
    if (value.empty()) return d;
    long long rank = -1, ms = -1;
    int used = 0;
    const bool parsed = std::sscanf(value.c_str(), "%lld:%lld%n", &rank, &ms, &used) == 2 &&
                        size_t(used) == value.size() && value.find(' ') == std::string::npos &&
                        value.find('+') == std::string::npos;
    const std::string ranks =
        world_size > 0 ? fmt::format("0..{}", world_size - 1) : std::string("a world rank");
    WEFT_CHECK(
        parsed && rank >= 0 && ms >= 0 && (world_size == 0 || rank < world_size) && ms <= 3'600'000,
        "--inject-delay '{}': expected RANK:MS with RANK {} and MS milliseconds in "
        "0..3600000 (a testing aid that slows one rank)",
        value, ranks);
    d.rank = int(rank);
    d.ms = ms;
    return d;
}

model::ModelConfig TrainOptions::model_config() const {
    return reshaped_preset(model, n_layer, n_head, n_embd, n_positions);
}

std::string TrainOptions::first_model_flag() const {
    if (model_given) return "--model " + model;
    const std::pair<const char*, int64_t> shape[] = {{"--n-layer", n_layer},
                                                     {"--n-head", n_head},
                                                     {"--n-embd", n_embd},
                                                     {"--n-positions", n_positions}};
    for (const auto& [flag, value] : shape)
        if (value) return fmt::format("{} {}", flag, value);
    return {};
}

void check_same_model(model::ModelConfig asked, const model::ModelConfig& cfg,
                      const std::string& source, const std::string& flag,
                      const std::string& holder) {
    // The --moe-* training coefficients may differ without changing the model.
    asked.moe_aux_loss_coef = cfg.moe_aux_loss_coef;
    asked.moe_z_loss_coef = cfg.moe_z_loss_coef;
    asked.moe_capacity_factor = cfg.moe_capacity_factor;
    asked.moe_router_bias_rate = cfg.moe_router_bias_rate;
    // Compared as checkpoints write configs: defaults resolved (a preset's 0 kv heads are its
    // n_head heads).
    const nlohmann::json a = asked.to_json(), c = cfg.to_json();
    if (a == c) return;
    std::string field;
    for (const auto& [key, value] : c.items())
        if (field.empty() && (!a.contains(key) || a[key] != value))
            field = fmt::format("{} {} in {}, {} asked", key, value.dump(), holder,
                                a.contains(key) ? a[key].dump() : "none");
    for (const auto& [key, value] : a.items())
        if (field.empty() && !c.contains(key))
            field = fmt::format("{} {} asked, none in {}", key, value.dump(), holder);
    WEFT_CHECK(false,
               "{}: {} asks for another model than {} holds ({}); {} gives the model, so drop "
               "the model flags or give its own values, or start a new run",
               source, flag, holder, field, holder);
}

void TrainOptions::check_model_flags(const model::ModelConfig& cfg, const std::string& source,
                                     const std::string& holder) const {
    const std::string flag = first_model_flag();
    if (flag.empty()) return;
    // The same command line again with --resume (or with --model-dir beside the preset it holds)
    // is the usual way to run: flags that name the source's own architecture are fine. Shape
    // flags alone reshape the source's model.
    check_same_model(reshaped(model_given ? model::model_preset(model) : cfg, n_layer, n_head,
                              n_embd, n_positions),
                     cfg, source, flag, holder);
}

void TrainOptions::apply_moe_overrides(model::ModelConfig& cfg, const std::string& name) const {
    const std::pair<const char*, const std::optional<double>*> flags[] = {
        {"--moe-aux-loss-coef", &moe_aux_loss_coef},
        {"--moe-z-loss-coef", &moe_z_loss_coef},
        {"--moe-capacity-factor", &moe_capacity_factor},
        {"--moe-router-bias-update-rate", &moe_router_bias_update_rate}};
    for (const auto& [flag, value] : flags)
        WEFT_CHECK(!*value || cfg.n_experts > 0,
                   "{} {}: model '{}' has no mixture-of-experts layers (expected a model with "
                   "experts, e.g. --model moe-tiny)",
                   flag, **value, name);
    if (moe_aux_loss_coef) cfg.moe_aux_loss_coef = *moe_aux_loss_coef;
    if (moe_z_loss_coef) cfg.moe_z_loss_coef = *moe_z_loss_coef;
    if (moe_capacity_factor) cfg.moe_capacity_factor = *moe_capacity_factor;
    if (moe_router_bias_update_rate) cfg.moe_router_bias_rate = *moe_router_bias_update_rate;
}

std::filesystem::path TrainOptions::val_path() const {
    if (!val_data.empty()) return val_data;
    std::string s = data.string();
    auto pos = s.rfind("_train");
    if (pos == std::string::npos) return {};
    std::filesystem::path guess = s.substr(0, pos) + "_val" + s.substr(pos + 6);
    return std::filesystem::exists(guess) ? guess : std::filesystem::path{};
}

void TrainOptions::validate() const {
    check_run_sizes(steps, batch_size, seq_len, threads, peak_gflops);
    WEFT_CHECK(layout.cp <= 1 || seq_len % (2 * layout.cp) == 0,
               "--seq-len {} with --cp {}: context parallelism cuts every sequence into 2 x cp = "
               "{} zigzag chunks, so the sequence length must be a multiple of {}",
               seq_len, layout.cp, 2 * layout.cp, 2 * layout.cp);
    WEFT_CHECK(pack == "none" || pack == "documents", "--pack must be none or documents, got '{}'",
               pack);
    WEFT_CHECK(!balance || pack == "documents",
               "--balance with --pack {}: balancing moves whole documents between the "
               "data-parallel ranks; expected --pack documents",
               pack);
    WEFT_CHECK(!balance || layout.pp <= 1,
               "--balance with --pp {}: a balanced step may run more micro-batches than the "
               "last, which the pipeline schedules do not take yet; expected --pp 1",
               layout.pp);
    WEFT_CHECK(eval_every >= 0, "--eval-every must be non-negative, got {}", eval_every);
    WEFT_CHECK(eval_batches >= 1, "--eval-batches must be at least 1, got {}", eval_batches);
    WEFT_CHECK(save_every >= 0, "--save-every must be non-negative, got {}", save_every);
    WEFT_CHECK(keep_checkpoints >= 1, "--keep-checkpoints must be at least 1, got {}",
               keep_checkpoints);
    WEFT_CHECK(exit_after >= 0, "--exit-after must be non-negative, got {}", exit_after);
    WEFT_CHECK(log_every >= 1, "--log-every must be at least 1, got {}", log_every);
    WEFT_CHECK(bucket_mb > 0, "--bucket-mb must be positive, got {}", bucket_mb);
    WEFT_CHECK(comm_timeout >= 0, "--comm-timeout must be positive (0: the default), got {}",
               comm_timeout);
    WEFT_CHECK(!data.empty(), "--data is required");
    WEFT_CHECK(dtype == "fp32" || dtype == "bf16", "--dtype must be fp32 or bf16, got '{}'", dtype);
    WEFT_CHECK(grad_reduce_dtype == "fp32" || grad_reduce_dtype == "bf16",
               "--grad-reduce-dtype must be fp32 or bf16, got '{}'", grad_reduce_dtype);
    parse_inject_delay(inject_delay, 0);
    const std::pair<const char*, const std::optional<double>*> moe[] = {
        {"--moe-aux-loss-coef", &moe_aux_loss_coef},
        {"--moe-z-loss-coef", &moe_z_loss_coef},
        {"--moe-capacity-factor", &moe_capacity_factor},
        {"--moe-router-bias-update-rate", &moe_router_bias_update_rate}};
    for (const auto& [flag, value] : moe)
        WEFT_CHECK(!*value || (std::isfinite(**value) && **value >= 0),
                   "{} must be 0 (off{}) or a positive number, got {}", flag,
                   value == &moe_capacity_factor ? ": dropless" : "", **value);
    optim.validate();
    WEFT_CHECK(offload.empty() || offload == "optimizer" || offload == "optimizer+params",
               "--offload '{}': expected 'optimizer' (or 'optimizer+params')", offload);
    WEFT_CHECK(offload_group_mb > 0 && offload_group_mb <= 1024,
               "--offload-group-mb {}: expected a size in (0, 1024] MiB", offload_group_mb);
    WEFT_CHECK(offload.empty() || !async_checkpoint,
               "--async-checkpoint with --offload {}: a checkpoint then streams the moments "
               "from the offload files while the step waits, and no copy is kept to write "
               "behind training; expected one of the two flags",
               offload);
    if (!offload.empty()) offload::check_offload_dir(offload_dir, "--offload-dir");
    WEFT_CHECK(grad_dtype.empty() || grad_dtype == "fp32" || grad_dtype == "bf16",
               "--grad-dtype must be fp32 or bf16, got '{}'", grad_dtype);
    WEFT_CHECK(resolved_grad_dtype() == "fp32" || dtype == "bf16",
               "--grad-dtype bf16 with --dtype {}: the gradients kept as bf16 are those the bf16 "
               "products' weights have; expected --dtype bf16",
               dtype);
}

std::string TrainOptions::resolved_grad_dtype() const {
    if (!grad_dtype.empty()) return grad_dtype;
    return dtype == "bf16" && !offload.empty() ? "bf16" : "fp32";
}

bool TrainOptions::bf16_working_copy() const {
    return !offload.empty() && resolved_grad_dtype() == "bf16";
}

bool TrainOptions::params_offloaded() const {
    return offload == "optimizer+params";
}

void check_bf16_grads(const TrainOptions& o, const Layout& l, const model::ModelConfig& cfg) {
    if (o.resolved_grad_dtype() == "bf16")
        WEFT_CHECK(cfg.n_experts == 0,
                   "--grad-dtype bf16: the model has mixture-of-experts layers, whose router reads "
                   "its weights in fp32; expected a dense model (or --grad-dtype fp32)");
    const bool files = o.params_offloaded();
    if (!o.bf16_working_copy() && !files) return;
    // The working copy is the whole buffer, reduced and gathered over dp (docs/memory.md).
    const char* what = files ? "--offload optimizer+params (the working weights and gradients "
                               "on disk, a layer at a time)"
                             : "--dtype bf16 --offload optimizer (the bf16 working copy, master "
                               "weights on disk)";
    const char* instead = files ? "--offload optimizer to keep the weights in memory"
                                : "--grad-dtype fp32 to keep fp32 weights and gradients in memory";
    auto refuse = [&](const char* flag, int value) {
        fail("{} with {} {}: it runs data parallel only so far; expected {} 1, or {}", what, flag,
             value, flag, instead);
    };
    if (l.tp > 1) refuse("--tp", l.tp);
    if (l.pp > 1) refuse("--pp", l.pp);
    if (l.cp > 1) refuse("--cp", l.cp);
    WEFT_CHECK(l.zero <= 1,
               "{} with --zero {}: the {}working copy keeps the whole buffer; expected --zero 0 "
               "or 1",
               what, l.zero, files ? "" : "bf16 ");
    WEFT_CHECK(!files || cfg.n_experts == 0,
               "{}: the model has mixture-of-experts layers, whose experts' tensors the working "
               "copy does not lay out; expected a dense model, or {}",
               what, instead);
}

}  // namespace weft::train
