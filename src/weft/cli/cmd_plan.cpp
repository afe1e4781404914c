#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>

#include "weft/cli/flag_checks.hpp"
#include "weft/core/error.hpp"
#include "weft/offload/streamed_state.hpp"
#include "weft/optim/registry.hpp"
#include "weft/parallel/pipeline/partition.hpp"
#include "weft/plan/report.hpp"

namespace weft::cli {

namespace {
struct PlanArgs {
    std::string model, cluster, dtype = "bf16", profile, recompute, schedule, cp_kind = "ring";
    std::string grad_reduce_dtype, attention, swiglu, pp_layers;
    std::string offload;
    bool tp_overlap = false, no_dp_overlap = false, pp_keep_outputs = false;
    std::string optimizer = "adamw";
    int64_t global_batch = 0, seq_len = 0, micro_batch = 0, max_micro_batch = 64;
    int top = 5, devices = 0, nodes = 0, dp = 0, tp = 0, pp = 0, cp = 0, vpp = 0, zero = -1;
    int cp_ulysses = 0;
    bool ring_bidirectional = false;
    bool sp = false, no_sp = false, json = false;
    double bucket_mb = 25;
    int ep = 0;
    double moe_imbalance = 0;
    std::string doc_lengths;
    bool balance = false;
    int64_t max_doc_len = 32768, doc_steps = 16;
    uint64_t seed = 1337;  // weft train's default
};

template <typename T>
std::optional<T> given(T v, T unset) {
    return v == unset ? std::nullopt : std::optional<T>(v);
}
}  // namespace

void add_plan_command(CLI::App& app) {
    auto a = std::make_shared<PlanArgs>();
    CLI::App* c = app.add_subcommand(
        "plan",
        "Predict step time, throughput and memory per device of parallel layouts on a cluster, "
        "and pick the best (docs/planner.md)");
    c->add_option("--model", a->model, "Model preset or JSON file (configs/models/)")->required();
    c->add_option("--cluster", a->cluster, "Cluster file, or a preset in configs/clusters/")
        ->required();
    c->add_option("--global-batch", a->global_batch, "Sequences per optimizer step")->required();
    c->add_option("--seq-len", a->seq_len, "Tokens per sequence (default: the model's context)");
    c->add_option("--dtype", a->dtype,
                  "bf16 | fp16 (mixed precision) | fp8 (Transformer Engine: fp8 products, bf16 "
                  "otherwise) | fp32")
        ->capture_default_str();
    c->add_option("--attention", a->attention,
                  "flash (FlashAttention: no s x s scores kept, the GPU default) | scores (the "
                  "unfused softmax of Korthikanti et al. 2022, Table 2)");
    c->add_option("--swiglu", a->swiglu,
                  "What a SwiGLU MLP keeps for its backward: kept (gate, up and their product, "
                  "as Megatron-Core and Transformer Engine; the default) | fused (gate and up; "
                  "the fused backward recomputes the product, as xformers' SwiGLU)");
    c->add_flag("--tp-overlap", a->tp_overlap,
                "Overlap tensor-parallel collectives with the products (Megatron-Core's "
                "tp_comm_overlap)");
    c->add_flag("--no-dp-overlap", a->no_dp_overlap,
                "Reduce gradients after the last backward instead of overlapped with it (2021 "
                "Megatron-LM, DeepSpeed's pipeline engine)");
    c->add_flag("--pp-keep-outputs", a->pp_keep_outputs,
                "Count each pipeline chunk's sent output as kept until its backward "
                "(torch.distributed.pipelining's default) instead of freed after the send "
                "(Megatron-LM, Llama 3)");
    c->add_option("--pp-layers", a->pp_layers,
                  "Layers of each pipeline chunk, e.g. 7,8,8,7 (needs --pp; the engine's "
                  "--pp-layers); a 0 first or last: the embedding or the head a chunk of its own "
                  "(GPU profile only, as Llama 3 405B)");
    c->add_option("--grad-reduce-dtype", a->grad_reduce_dtype,
                  "fp32 | bf16: what data-parallel gradient reductions carry (the engine's "
                  "--grad-reduce-dtype); default: fp32 under the engine profile, the --dtype's "
                  "gradient bytes under korthikanti");
    c->add_option("--offload", a->offload,
                  "optimizer: price weft train --offload optimizer (engine profile): the "
                  "optimizer's state on disk, its streaming pool in memory; optimizer+params: "
                  "the master and working weights and gradients on disk too, a few layers in "
                  "memory");
    c->add_option("--optimizer", a->optimizer,
                  fmt::format("Optimizer whose state is counted: {}", optim::optimizer_names()))
        ->capture_default_str();
    c->add_option("--memory-profile", a->profile,
                  "engine (this engine, fp32 CPU) | korthikanti (GPU mixed precision); default: "
                  "engine for fp32, else korthikanti");
    c->add_option("--top", a->top, "How many layouts to show")->capture_default_str();
    c->add_option("--nodes", a->nodes, "Override the cluster file's number of nodes");
    c->add_option("--devices", a->devices,
                  "Use this many devices (default: the whole cluster, or dp*tp*pp*cp when --dp "
                  "is given)");
    c->add_option("--dp", a->dp, "Fix the data-parallel degree");
    c->add_option("--tp", a->tp, "Fix the tensor-parallel degree");
    c->add_option("--pp", a->pp, "Fix the pipeline-parallel degree");
    c->add_option("--cp", a->cp, "Fix the context-parallel degree");
    c->add_option("--cp-kind", a->cp_kind,
                  "How cp splits attention: ring | ulysses | hybrid | all-gather (K, V gathered, "
                  "as Llama 3's 128K stage)")
        ->capture_default_str();
    c->add_option("--cp-ulysses", a->cp_ulysses, "With --cp-kind hybrid: Ulysses group size");
    c->add_flag("--ring-bidirectional", a->ring_bidirectional,
                "With --cp-kind ring: price TokenRing (queries one way, partial results back; "
                "both link directions at once)");
    c->add_option("--ep", a->ep,
                  "Fix the expert-parallel degree (MoE models; folds over dp: divides dp and the "
                  "experts)");
    c->add_option("--moe-imbalance", a->moe_imbalance,
                  "Rows the busiest ep rank's experts get, over the balanced share (default: "
                  "the model's capacity factor, or 1 when dropless)");
    c->add_option("--doc-lengths", a->doc_lengths,
                  "Packed documents (weft train --pack documents): lognormal:MEDIAN:SIGMA | "
                  "pareto:MIN:ALPHA | a token file with its document index (docs/long_context.md)");
    c->add_option("--max-doc-len", a->max_doc_len, "Longest document a distribution draws")
        ->capture_default_str();
    c->add_flag("--balance", a->balance,
                "With --doc-lengths: price weft train --balance (documents balanced over dp)");
    c->add_option("--doc-steps", a->doc_steps, "With --doc-lengths: global batches laid out")
        ->capture_default_str();
    c->add_option("--seed", a->seed, "With --doc-lengths: the sample order's seed (weft train's)")
        ->capture_default_str();
    c->add_option("--vpp", a->vpp, "Fix the virtual stages per pipeline rank (interleaved)");
    c->add_option("--zero", a->zero, "Fix the ZeRO stage (0-3)");
    c->add_option("--micro-batch", a->micro_batch, "Fix the micro-batch size (sequences)");
    c->add_option("--max-micro-batch", a->max_micro_batch, "Largest micro-batch searched")
        ->capture_default_str();
    c->add_flag("--sp", a->sp, "Fix sequence parallelism on");
    c->add_flag("--no-sp", a->no_sp, "Fix sequence parallelism off");
    c->add_option("--recompute", a->recompute, "Fix recomputation: none | selective | full");
    c->add_option("--pp-schedule", a->schedule, "Fix the schedule: gpipe | 1f1b | interleaved");
    c->add_option("--bucket-mb", a->bucket_mb, "Gradient bucket, MiB")->capture_default_str();
    c->add_flag("--json", a->json, "Print one JSON object");
    require_counts(c, {"--seq-len", "--nodes", "--devices", "--dp", "--tp", "--pp", "--cp",
                       "--cp-ulysses", "--ep", "--vpp", "--micro-batch", "--max-doc-len"});
    c->callback([a] {
        plan::Workload w;
        w.model = plan::load_model(a->model);
        w.global_batch = a->global_batch;
        w.seq_len = a->seq_len ? a->seq_len : w.model.config.n_positions;
        WEFT_CHECK(w.global_batch >= 1, "--global-batch must be at least 1, got {}",
                   w.global_batch);
        WEFT_CHECK(w.seq_len >= 1 && w.seq_len <= w.model.config.n_positions,
                   "--seq-len must be in [1, {}] for {}, got {}", w.model.config.n_positions,
                   w.model.name, w.seq_len);
        w.profile = !a->profile.empty()  ? plan::parse_profile(a->profile)
                    : a->dtype == "fp32" ? plan::MemoryProfile::engine
                                         : plan::MemoryProfile::korthikanti;
        // A GPU run keeps Megatron-Core's state (fp32 main gradients); fp32 is this engine's.
        w.prec = w.profile == plan::MemoryProfile::engine ? plan::engine_precision(a->dtype)
                 : a->dtype == "fp32"                     ? plan::precision(a->dtype)
                                                          : plan::megatron_precision(a->dtype);
        if (!a->attention.empty()) {
            WEFT_CHECK(w.profile == plan::MemoryProfile::korthikanti,
                       "--attention {} needs --memory-profile korthikanti (the engine profile "
                       "counts the engine's own attention)",
                       a->attention);
            w.attention = plan::parse_attention(a->attention);
        }
        if (!a->swiglu.empty()) w.glu = plan::parse_glu_backward(a->swiglu);
        w.tp_overlap = a->tp_overlap;
        WEFT_CHECK(!a->pp_keep_outputs || w.profile == plan::MemoryProfile::korthikanti,
                   "--pp-keep-outputs needs --memory-profile korthikanti (the engine always keeps "
                   "a chunk's output until its backward, and its profile counts it)");
        w.pp_outputs_kept = a->pp_keep_outputs;
        w.dp_overlap = !a->no_dp_overlap;
        if (!a->grad_reduce_dtype.empty())
            w.prec = plan::with_grad_reduce(w.prec, a->grad_reduce_dtype);
        WEFT_CHECK(
            a->offload.empty() || a->offload == "optimizer" || a->offload == "optimizer+params",
            "--offload '{}': expected 'optimizer' or 'optimizer+params'", a->offload);
        WEFT_CHECK(a->offload.empty() || w.profile == plan::MemoryProfile::engine,
                   "--offload prices weft train's own offload, the engine memory profile; expected "
                   "--memory-profile engine (or --dtype fp32), got {}",
                   a->profile.empty() ? "--dtype " + a->dtype : "--memory-profile " + a->profile);
        if (!a->offload.empty()) {
            w.offload_group_floats =
                int64_t(offload::kDefaultGroupMb * double(1 << 20) / sizeof(float));
            w.params_offloaded = a->offload == "optimizer+params";
            // weft train's default under bf16 with offload (--grad-dtype bf16): the bf16 working
            // copy, the fp32 master weights with the optimizer's state on disk.
            w.bf16_working_copy = a->dtype == "bf16";
        }
        w.prec = plan::with_optimizer(w.prec, a->optimizer);
        w.optimizer = a->optimizer;
        plan::check_glu_backward(w);
        WEFT_CHECK(a->bucket_mb > 0, "--bucket-mb must be positive, got {}", a->bucket_mb);
        w.bucket_mb = a->bucket_mb;
        WEFT_CHECK(a->moe_imbalance == 0 || a->moe_imbalance >= 1,
                   "--moe-imbalance must be at least 1 (the busiest rank over the balanced share), "
                   "got {}",
                   a->moe_imbalance);
        w.moe_imbalance = a->moe_imbalance;
        WEFT_CHECK(!a->balance || !a->doc_lengths.empty(),
                   "--balance prices balanced packed documents; it needs --doc-lengths");
        WEFT_CHECK(a->doc_steps >= 1, "--doc-steps must be at least 1, got {}", a->doc_steps);
        if (!a->doc_lengths.empty()) {
            w.documents = plan::document_source(
                a->doc_lengths, w.seq_len, a->doc_steps * w.global_batch * w.seq_len + w.seq_len,
                a->max_doc_len);
            w.documents->balance = a->balance;
            w.documents->seed = a->seed;
            w.documents->steps = a->doc_steps;
        }
        plan::Cluster cluster = plan::load_cluster(plan::find_cluster_file(a->cluster));
        if (a->nodes) cluster.nodes = a->nodes;
        WEFT_CHECK(a->offload.empty() || (cluster.disk.read > 0 && cluster.disk.write > 0),
                   "--offload {} prices the disk's time, but {} has no \"disk\": expected "
                   "\"disk\": {{\"read_gbs\": ..., \"write_gbs\": ...}} (the node's disk, "
                   "docs/planner.md)",
                   a->offload, cluster.file);

        plan::SearchSpace s;
        s.dp = given(a->dp, 0), s.tp = given(a->tp, 0), s.pp = given(a->pp, 0);
        s.cp = given(a->cp, 0), s.vpp = given(a->vpp, 0), s.ep = given(a->ep, 0);
        WEFT_CHECK(a->zero >= -1 && a->zero <= 3, "--zero must be 0, 1, 2 or 3, got {}", a->zero);
        s.zero = given(a->zero, -1);
        s.micro_batch = given<int64_t>(a->micro_batch, 0);
        WEFT_CHECK(!(a->sp && a->no_sp), "--sp and --no-sp contradict each other");
        if (a->sp || a->no_sp) s.sp = a->sp;
        if (!a->recompute.empty()) s.recompute = parse_recompute(a->recompute);
        if (!a->schedule.empty()) s.schedule = parse_pp_schedule_flag(a->schedule);
        // All-gather context parallelism is the planner's alone (the engine runs ring, Ulysses
        // and their hybrid).
        s.cp_all_gather = a->cp_kind == "all-gather";
        s.cp_kind = s.cp_all_gather ? CpKind::ring : parse_cp_kind(a->cp_kind);
        WEFT_CHECK(s.cp_kind == CpKind::hybrid ? a->cp_ulysses >= 1 : a->cp_ulysses == 0,
                   "--cp-ulysses {} goes with --cp-kind hybrid (at least 1), got --cp-kind {}",
                   a->cp_ulysses, a->cp_kind);
        s.cp_ulysses = a->cp_ulysses;
        WEFT_CHECK(!a->ring_bidirectional || s.cp_kind == CpKind::ring,
                   "--ring-bidirectional is a kind of ring (TokenRing): it needs --cp-kind ring, "
                   "got --cp-kind {}",
                   a->cp_kind);
        s.ring_bidirectional = a->ring_bidirectional;
        WEFT_CHECK(a->pp_layers.empty() || a->pp > 0,
                   "--pp-layers {} needs --pp (the stages it splits)", a->pp_layers);
        // A list that cannot split this model is the user's mistake, not a layout to reject.
        if (!a->pp_layers.empty())
            pipeline::partition_layers(int(w.model.config.n_layer), a->pp, a->vpp ? a->vpp : 1,
                                       a->pp_layers, false, true);
        s.pp_layers = a->pp_layers;
        s.devices = a->devices;
        WEFT_CHECK(a->max_micro_batch >= 1, "--max-micro-batch must be at least 1, got {}",
                   a->max_micro_batch);
        s.max_micro_batch = a->max_micro_batch;
        WEFT_CHECK(a->top >= 1, "--top must be at least 1, got {}", a->top);

        const plan::SearchResult r = plan::search(w, cluster, s, a->top);
        if (a->json)
            fmt::print("{}\n", plan::result_json(w, cluster, r).dump(2));
        else
            fmt::print("{}", plan::result_text(w, cluster, r));
    });
}

}  // namespace weft::cli
