#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include "weft/cli/commands.hpp"
#include "weft/cli/model_options.hpp"
#include "weft/cli/stop_signals.hpp"
#include "weft/cli/tp_group.hpp"
#include "weft/core/error.hpp"
#include "weft/model/counts.hpp"
#include "weft/serve/http_front.hpp"
#include "weft/serve/tp_steps.hpp"
#include "weft/train/model_source.hpp"
#include "weft/train/process.hpp"

namespace weft::cli {

namespace {
struct ServeArgs {
    std::filesystem::path model_dir, ckpt, tokenizer_dir = "data";
    std::filesystem::path tokenizer;
    serve::FrontOptions front;
    serve::EngineOptions engine;
    double kv_cache_gib = 1.0;
    int threads = 0;
    std::string dtype = "fp32";
    int tp = 1;
    bool spec_vocab_given = false;  // --spec-vocab was on the command line
    std::string tool_call_parser = "none";
};

// The name clients give as "model": the last component of the path the user named.
std::string model_name(const std::filesystem::path& p) {
    std::filesystem::path n = p.lexically_normal();
    if (n.filename().empty()) n = n.parent_path();
    return n.filename().string();
}

void serve(ServeArgs& a) {
    WEFT_CHECK(a.kv_cache_gib > 0, "--kv-cache-gib must be positive, got {}", a.kv_cache_gib);
    a.engine.validate();
    a.engine.bf16 = generation_bf16(a.dtype);
    const train::ModelSource source = train::open_model_source(a.model_dir, a.ckpt);
    const std::optional<train::ModelSource> draft_source =
        open_draft_source(a.engine.spec, source.cfg, a.tp, /*on_rank0=*/true);
    if (a.engine.spec.kind == "ppd") a.engine.spec.ppd = open_ppd(a.engine.spec, source.cfg, a.tp);
    a.engine.spec.shortlist = open_spec_vocab(a.engine.spec, source.cfg, a.spec_vocab_given);
    const std::unique_ptr<data::Tokenizer> tok = data::open_tokenizer(a.tokenizer, a.tokenizer_dir);
    const TpGroup tp(a.tp, source.cfg, "serve");
    const bool lead = tp.rank() == 0;
    const int threads = train::set_threads_per_rank(a.threads);
    // Decided before the weights load: a template outside the subset is said at once.
    const serve::ChatFormat chat = serve::choose_chat_format(a.tokenizer, source.cfg.family, *tok);
    if (!chat.warning.empty() && lead)
        fmt::print(stderr, "weft serve: warning: {}\n", chat.warning);
    // SIGTERM and SIGINT drain rank 0 (below); the other ranks end when it says so.
    StopSignals signals(!lead);

    train::LoadedModel m = train::load_model(source, tp.comm());
    const model::ModelConfig& cfg = m.model->config();
    // Each rank's pool holds its own kv heads: --kv-cache-gib per rank, the same blocks on each.
    a.engine.kv_blocks = serve::kv_blocks_in(a.kv_cache_gib, cfg.n_layer, m.model->kv_width(),
                                             a.engine.block_tokens, a.engine.bf16);
    const double block_gib =
        1.0 / double(serve::kv_blocks_in(1.0, cfg.n_layer, m.model->kv_width(), 1, a.engine.bf16));
    WEFT_CHECK(
        a.engine.kv_blocks >= 1,
        "--kv-cache-gib {} holds no KV cache block of {} positions (expected at least {:.3g} "
        "GiB for this model)",
        a.kv_cache_gib, a.engine.block_tokens, block_gib * double(a.engine.block_tokens));
    std::unique_ptr<serve::TpSteps> steps;
    if (tp.size() > 1) steps = std::make_unique<serve::TpSteps>(tp.group());
    if (!lead) {
        model::RowForward forward(cfg, m.model->layout(), m.params.data(), a.engine.bf16,
                                  tp.comm());
        model::KvPool pool(a.engine.kv_blocks, cfg.n_layer, forward.kv_width(), cfg.head_dim(),
                           a.engine.block_tokens, a.engine.bf16);
        const auto& ppd = a.engine.spec.ppd;
        steps->follow(forward, pool,
                      ppd ? std::span<const float>(ppd->embeddings) : std::span<const float>());
        return;
    }
    serve::EngineTp engine_tp{tp.comm(), {}};
    if (steps) engine_tp.announce = [&](const model::RowBatch& b) { steps->send(b); };
    // The draft's cache holds as many positions as the model's, and each slot's guesses.
    train::LoadedModel d;
    std::unique_ptr<decode::DraftModel> draft;
    if (draft_source) {
        d = train::load_model(*draft_source);
        const int64_t blocks =
            (a.engine.kv_blocks * a.engine.block_tokens + 15) / 16 + 2 * a.engine.slots;
        draft = std::make_unique<decode::DraftModel>(d.model->config(), d.model->layout(),
                                                     d.params.data(), a.engine.bf16, blocks);
    }
    serve::Engine engine(
        cfg, m.model->layout(), m.params.data(), [&tok](int32_t t) { return tok->decode_token(t); },
        a.engine, std::move(draft), engine_tp);
    // Before the port opens: the first request then finds the weights packed.
    const double warm_s = engine.warm_up();
    const serve::ApiContext ctx{model_name(a.ckpt.empty() ? a.model_dir : a.ckpt), *tok, engine,
                                chat, a.tool_call_parser};
    serve::HttpFront front(ctx, engine, a.front);
    const int port = front.bind();

    // The engine loop runs on this thread, the one that talks to MPI (comm::MpiEnv's funneled
    // level) when the forward runs over several ranks; HTTP on another.
    std::atomic<bool> drained{false};
    std::thread waiter([&] {
        const int sig = signals.wait();
        if (sig == 0) return;  // woken by the exit below, not by a signal
        fmt::print(stderr, "weft serve: {}: draining the requests in flight, then exiting\n",
                   sig == SIGTERM ? "SIGTERM" : "SIGINT");
        front.stop();
    });
    std::thread http([&] {
        front.listen();  // returns once stopped and every handler has answered
        drained = true;
    });
    fmt::print(
        "weft serve: model {} ({}, {:.2f}M parameters, context {}), dtype {}, tp {}, {} threads, "
        "KV pool {} blocks of {} tokens ({} tokens), {} slots, batch {} tokens, speculation {}, "
        "http://{}:{}/v1\n",
        ctx.model_id, cfg.family, double(model::num_parameters(cfg)) / 1e6, cfg.n_positions,
        a.dtype, tp.size(), threads, a.engine.kv_blocks, a.engine.block_tokens,
        a.engine.kv_blocks * a.engine.block_tokens, a.engine.slots, a.engine.batch_tokens,
        a.engine.spec.kind, a.front.host, port);
    fmt::print("weft serve: warm-up forward {:.2f} s\n", warm_s);
    fmt::print("weft serve: chat template: {}; tool calls: {}\n", chat.description,
               a.tool_call_parser == "none" ? "forced only (tool_choice \"auto\" needs "
                                              "--tool-call-parser)"
                                            : a.tool_call_parser + " (tool_choice \"auto\")");
    std::fflush(stdout);
    engine.run(drained);
    http.join();
    signals.wake();
    waiter.join();
    if (steps) steps->send_exit();
}
}  // namespace

void add_serve_command(CLI::App& app) {
    auto a = std::make_shared<ServeArgs>();
    CLI::App* c = app.add_subcommand(
        "serve", "Serve a model over HTTP with OpenAI's API (continuous batching)");
    add_model_source_options(c, a->model_dir, a->ckpt);
    add_tokenizer_options(c, a->tokenizer, a->tokenizer_dir);
    c->add_option("--host", a->front.host, "Address to listen on")->capture_default_str();
    c->add_option("--port", a->front.port, "Port to listen on (0: any free one)")
        ->capture_default_str()
        ->check(CLI::Range(0, 65535));
    c->add_option("--slots", a->engine.slots, "Requests running at once (more wait)")
        ->capture_default_str();
    c->add_option("--batch-tokens", a->engine.batch_tokens,
                  "Tokens per engine step, and the prompt chunk size")
        ->capture_default_str();
    c->add_option("--kv-cache-gib", a->kv_cache_gib, "Size of the KV cache pool in GiB")
        ->capture_default_str();
    c->add_option("--api-key", a->front.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/ routes");
    add_generation_dtype_option(c, a->dtype);
    add_speculation_options(c, a->engine.spec);
    add_spec_vocab_options(c, a->engine.spec);
    add_spec_tree_options(c, a->engine.spec);
    add_tp_option(c, a->tp);
    c->add_option("--tool-call-parser", a->tool_call_parser,
                  "How a chat's tool calls are read out of the model's text when the request "
                  "leaves the choice to it (tool_choice \"auto\"): hermes (<tool_call>{\"name\": "
                  "..., \"arguments\": ...}</tool_call>, the format of Qwen2.5, Hermes and "
                  "SmolLM3's templates), or none (\"auto\" is refused)")
        ->capture_default_str()
        ->check(CLI::IsMember({"none", "hermes"}));
    c->add_option("--threads", a->threads,
                  "OpenMP threads (0: OMP_NUM_THREADS, else the node's cores)")
        ->capture_default_str();
    c->callback([a, c] {
        a->spec_vocab_given = c->count("--spec-vocab") > 0;
        serve(*a);
    });
}

}  // namespace weft::cli
