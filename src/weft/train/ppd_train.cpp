#include "weft/train/ppd_train.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "weft/ckpt/checkpoint_dir.hpp"
#include "weft/comm/mpi_env.hpp"
#include "weft/core/error.hpp"
#include "weft/data/loader.hpp"
#include "weft/data/token_file.hpp"
#include "weft/kernels/adamw.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/model/family.hpp"
#include "weft/model/generate.hpp"
#include "weft/model/kv_pool.hpp"
#include "weft/model/params.hpp"
#include "weft/model/row_batch.hpp"
#include "weft/optim/optimizer.hpp"
#include "weft/train/memory_fit.hpp"
#include "weft/train/model_source.hpp"
#include "weft/train/process.hpp"

namespace weft::train {

PpdTrainer::PpdTrainer(const model::ModelConfig& cfg, const float* params, int64_t tokens,
                       uint64_t seed, const std::string& target)
    : model_(model::make_model(cfg)),
      params_(params),
      teacher_(cfg, params),
      grads_(model_->layout().total),
      rng_(philox_for(seed, "ppd")),
      sample_(target == "sample") {
    const int64_t C = cfg.n_embd, V = cfg.vocab_size;
    p_.base = cfg;
    p_.tokens = tokens;
    // Every prompt starts at the mean token embedding, apart by a little noise so that they
    // can learn different things.
    const float* wte = model::unit_tensor(const_cast<float*>(params), model_->layout(), 0, 0);
    std::vector<double> mean(size_t(C), 0.0);
    for (int64_t v = 0; v < V; ++v)
        for (int64_t c = 0; c < C; ++c) mean[size_t(c)] += wte[v * C + c];
    p_.embeddings.resize(size_t(tokens * C));
    for (int64_t i = 0; i < tokens * C; ++i)
        p_.embeddings[size_t(i)] =
            float(mean[size_t(i % C)] / double(V)) + 0.02f * (rng_.uniform(draws_++) - 0.5f);
    m_.assign(p_.embeddings.size(), 0.0f);
    v_.assign(p_.embeddings.size(), 0.0f);
    grad_.assign(p_.embeddings.size(), 0.0f);
}

std::vector<int32_t> PpdTrainer::targets(const int32_t* tokens, int64_t B, int64_t T, int64_t t) {
    const model::ModelConfig& cfg = model_->config();
    const int64_t K = p_.tokens, V = cfg.vocab_size, Ts = t + 1 + K;
    WEFT_CHECK(t >= 0 && Ts <= T && T <= cfg.n_positions,
               "internal: prompts after position {} of windows of {} tokens", t, T);
    // Decoding verifies the guesses against the model's own continuation of the context, so that
    // is what the prompts learn: the base model continues each window's first t + 1 tokens by
    // itself for K + 1 tokens, and prompt j's target is its token j + 1 (prompt j does not see
    // the model's next token, the verify's root, and guesses the j after it). The window's own
    // tokens past t would be another text: a corpus's next token is a draw the prompts cannot
    // know, and the base model's guess after it as good as unpredictable.
    model::RowForward& teacher = teacher_.rows();
    model::KvPool kv(B * ((Ts + 15) / 16), cfg.n_layer, teacher.kv_width(), cfg.head_dim(), 16,
                     teacher.kv_bf16());
    std::vector<model::BlockTable> tables(static_cast<size_t>(B));
    std::vector<int32_t> next(static_cast<size_t>(B)), target(static_cast<size_t>(B * K));
    model::SampleOptions o;
    o.temperature = sample_ ? 1.0f : 0.0f;
    for (int64_t k = 0; k <= K; ++k) {
        model::RowBatch b;
        for (int64_t s = 0; s < B; ++s) {
            kv.grow(tables[size_t(s)], t + 1 + k);
            if (k == 0)
                b.add(std::span<const int32_t>(tokens + s * T, size_t(t + 1)), 0, tables[size_t(s)],
                      true);
            else
                b.add(std::span<const int32_t>(&next[size_t(s)], 1), t + k, tables[size_t(s)],
                      true);
        }
        const std::span<const float> logits = teacher.run(b, kv);
        for (int64_t s = 0; s < B; ++s) {
            next[size_t(s)] = model::pick_token(logits.subspan(size_t(s * V), size_t(V)), o,
                                                rng_.uniform(draws_++));
            if (k >= 1) target[size_t(s * K + k - 1)] = next[size_t(s)];
        }
    }
    return target;
}

double PpdTrainer::step(const int32_t* tokens, int64_t B, int64_t T, int64_t t, float lr,
                        int64_t step) {
    const model::ModelConfig& cfg = model_->config();
    const model::ParamLayout& layout = model_->layout();
    const int64_t K = p_.tokens, C = cfg.n_embd, Ts = t + 1 + K;
    WEFT_CHECK(t >= 0 && Ts <= T && T <= cfg.n_positions,
               "internal: prompts after position {} of windows of {} tokens", t, T);
    float* params = const_cast<float*>(params_);  // only read: no weight is stepped

    const std::vector<int32_t> target = targets(tokens, B, T, t);

    // The prompts' sequences: the window up to t, then the K prompt rows (embedded as token 0,
    // whose embedding is then swapped for the prompt's: a learned position embedding stays).
    // Their targets are the head's.
    // The blocks run over every row (the prompts attend to the context), the head only over
    // the prompt rows: a head-only span of B x K rows, as a pipeline's last chunk, so that the
    // vocabulary's products (most of a small model's work) are not spent on rows without a
    // target.
    model::LayerSpan blocks = model_->activation_span();
    blocks.head = false;
    std::unique_ptr<model::Activations> a = model_->new_activations(B, Ts, blocks);
    std::unique_ptr<model::Activations> h =
        model_->new_activations(B, K, model_->activation_span({int(cfg.n_layer), 0, true}));
    for (int64_t s = 0; s < B; ++s)
        for (int64_t r = 0; r < Ts; ++r)
            a->inputs[size_t(s * Ts + r)] = r > t ? 0 : tokens[s * T + r];
    std::copy(target.begin(), target.end(), h->targets.begin());
    model::FlatAccess w(layout, params, grads_.data());
    model_->embed_forward(*a, w);
    const float* wte0 = model::unit_tensor(params, layout, 0, 0);
    auto prompt_row = [&](int64_t s, int64_t j) { return (s * Ts + t + 1 + j) * C; };
    for (int64_t s = 0; s < B; ++s)
        for (int64_t j = 0; j < K; ++j) {
            float* x = a->resid_in(0) + prompt_row(s, j);
            const float* e = p_.embedding(j);
            for (int64_t c = 0; c < C; ++c) x[c] += e[c] - wte0[c];
        }
    const int L = int(cfg.n_layer);
    for (int l = 0; l < L; ++l) model_->block_forward(*a, w, l);
    for (int64_t s = 0; s < B; ++s)
        for (int64_t j = 0; j < K; ++j)
            std::copy_n(a->resid_in(L) + prompt_row(s, j), C, h->resid_in(L) + (s * K + j) * C);
    const double loss = model_->head_forward(*h, w, true, 1.0f / float(B * K)) / double(B * K);
    model_->head_backward(*h, w);
    const std::vector<float> dhead(model_->dresid(B, K), model_->dresid(B, K) + B * K * C);
    float* d = model_->dresid(B, Ts);
    std::fill_n(d, B * Ts * C, 0.0f);
    for (int64_t s = 0; s < B; ++s)
        for (int64_t j = 0; j < K; ++j)
            std::copy_n(dhead.data() + (s * K + j) * C, C, d + prompt_row(s, j));
    for (int l = L - 1; l >= 0; --l) model_->block_backward_frozen(*a, w, l);

    // The gradient of a prompt's embedding is that of the embedding's output at its rows.
    d = model_->dresid(B, Ts);
    std::fill(grad_.begin(), grad_.end(), 0.0f);
    for (int64_t s = 0; s < B; ++s)
        for (int64_t j = 0; j < K; ++j)
            for (int64_t c = 0; c < C; ++c) grad_[size_t(j * C + c)] += d[prompt_row(s, j) + c];
    kernels::AdamWParams ap{lr};
    ap.step = step + 1;
    kernels::adamw_update(p_.embeddings.data(), grad_.data(), m_.data(), v_.data(),
                          int64_t(grad_.size()), ap);
    return loss;
}

MemoryEstimate ppd_memory(const model::ModelConfig& cfg, int64_t B, int64_t T, int64_t K,
                          int64_t baseline) {
    const model::Family& f = model::family_of(cfg);
    const int64_t P = model::build_param_layout(cfg).total, C = cfg.n_embd;
    // Windows of up to T rows through the blocks, the K prompt rows of each through the head.
    const model::LayerSpan blocks{0, -1, false}, head{int(cfg.n_layer), 0, true};
    MemoryEstimate m;
    m.weights = 4 * P;
    m.grads = 4 * P;
    m.optimizer = 4 * 3 * K * C;
    m.activations = 4 * (model::activation_floats(cfg, B, T, blocks) +
                         model::activation_floats(cfg, B, K, head));
    m.scratch = 4 * (f.scratch_floats(cfg, B, T, 1, false) +
                     kernels::classifier_scratch_floats(B * K, cfg.vocab_size));
    // The base model's continuations: B windows of up to T - K rows, one logits row each; its
    // weights are the model's.
    m.teacher = teacher_memory(cfg, B, T, B, false).total();
    m.baseline = baseline;
    return m;
}

void run_ppd_training(const TrainOptions& o) {
    WEFT_CHECK(o.ppd_tokens >= 1 && o.ppd_tokens <= 16,
               "--ppd-tokens must be between 1 and 16, got {}", o.ppd_tokens);
    WEFT_CHECK(!o.ppd_base.empty(),
               "--ppd-tokens {} needs --base: the run or checkpoint of the model the prompt "
               "tokens guess for",
               o.ppd_tokens);
    WEFT_CHECK(o.ppd_target == "argmax" || o.ppd_target == "sample",
               "--ppd-target must be argmax or sample, got '{}'", o.ppd_target);
    WEFT_CHECK(!comm::under_mpirun(),
               "--ppd-tokens trains on one process, not under mpirun (its {} floats a prompt "
               "need no parallelism)",
               o.ppd_tokens);
    const std::string layout_flags = o.layout.describe(), plain = Layout{}.describe();
    WEFT_CHECK(layout_flags == plain,
               "--ppd-tokens trains on one process: drop the layout flags ({}, expected {})",
               layout_flags, plain);
    WEFT_CHECK(o.model_dir.empty() && !o.model_given && o.first_model_flag().empty(),
               "--ppd-tokens: --base gives the model, so drop {}",
               o.model_dir.empty() ? o.first_model_flag() : "--model-dir " + o.model_dir.string());
    WEFT_CHECK(!o.resume, "--ppd-tokens trains afresh: drop --resume");
    WEFT_CHECK(o.dtype == "fp32", "--ppd-tokens trains in fp32, got --dtype {}", o.dtype);
    WEFT_CHECK(o.steps >= 1 && o.batch_size >= 1, "--steps and --batch-size must be at least 1");
    WEFT_CHECK(!ckpt::find_latest(o.out),
               "run directory {} already holds checkpoints; choose another --out", o.out.string());
    const ModelSource source = open_model_source({}, o.ppd_base);
    const model::ModelConfig& cfg = source.cfg;
    WEFT_CHECK(o.seq_len >= o.ppd_tokens + 1 && o.seq_len <= cfg.n_positions,
               "--seq-len {} with --ppd-tokens {}: expected {} .. {} (the prompts and one token "
               "of context, within the model's context)",
               o.seq_len, o.ppd_tokens, o.ppd_tokens + 1, cfg.n_positions);
    data::TokenFile file = data::TokenFile::open(o.data, o.data_format);
    data::check_token_ids(file, cfg.vocab_size);
    const data::DataLoader loader(file, o.seq_len, o.seed, o.sequential);
    o.optim.validate();
    set_threads_per_rank(o.threads);
    const int64_t B = o.batch_size, T = o.seq_len, K = o.ppd_tokens;
    const MemoryEstimate mem = ppd_memory(cfg, B, T, K, current_rss_bytes());
    check_estimate_fits(mem, "--ppd-tokens over --base " + o.ppd_base.string(),
                        "a smaller --batch-size or --seq-len, or a smaller --base");

    LoadedModel base = load_model(source);
    PpdTrainer trainer(cfg, base.params.data(), o.ppd_tokens, o.seed, o.ppd_target);
    const int64_t share = K * cfg.n_embd;
    fmt::print(
        "weft: PPD: {} prompt tokens, {} parameters ({:.5f}% of the model's {}), base {} "
        "frozen\n",
        K, share, 100.0 * double(share) / double(base.model->layout().total),
        base.model->layout().total, o.ppd_base.string());
    fmt::print("weft: PPD memory estimate: {}\n", mem.describe());
    std::vector<int32_t> tokens(static_cast<size_t>(B * T)), unused(static_cast<size_t>(T));
    const Philox where = philox_for(o.seed, "ppd-insert");
    const auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t losses = 0;
    for (int64_t step = 0; step < o.steps; ++step) {
        for (int64_t s = 0; s < B; ++s)
            loader.sample(step, s, B, tokens.data() + s * T, unused.data());
        const int64_t t =
            std::min<int64_t>(int64_t(where.uniform(uint64_t(step)) * float(T - K)), T - K - 1);
        loss_sum += trainer.step(tokens.data(), B, T, t,
                                 optim::learning_rate(o.optim, step, o.steps), step);
        ++losses;
        if ((step + 1) % std::max<int64_t>(o.log_every, 1) == 0 || step + 1 == o.steps) {
            const double s =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            fmt::print("step {:5d}/{} | prompt loss {:.4f} | {:.1f} s\n", step + 1, o.steps,
                       loss_sum / double(losses), s);
            std::fflush(stdout);
            loss_sum = 0;
            losses = 0;
        }
    }
    const nlohmann::json run = {{"base", o.ppd_base.string()},
                                {"data", o.data.string()},
                                {"steps", o.steps},
                                {"batch_size", B},
                                {"seq_len", T},
                                {"lr", o.optim.lr},
                                {"seed", o.seed},
                                {"target", o.ppd_target}};
    decode::save_ppd(o.out, o.steps, trainer.prompts(), run);
    fmt::print(
        "weft: PPD prompt tokens saved in {}; peak resident memory {:.1f} MiB (estimate "
        "{:.1f} MiB)\n",
        ckpt::checkpoint_path(o.out, o.steps).string(), double(peak_rss_bytes()) / (1 << 20),
        double(mem.total()) / (1 << 20));
}

}  // namespace weft::train
