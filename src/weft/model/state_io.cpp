#include "weft/model/state_io.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <vector>

#include "weft/ckpt/atomic.hpp"
#include "weft/ckpt/hf_config.hpp"
#include "weft/ckpt/safetensors.hpp"
#include "weft/core/error.hpp"

namespace weft::model {

namespace {

// Hugging Face's GPT-2 uses Conv1D for these, storing the weight as [in, out].
bool is_conv1d(const std::string& name) {
    auto ends = [&](const char* s) {
        std::string suffix(s);
        return name.size() >= suffix.size() &&
               name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    return ends("attn.c_attn.weight") || ends("attn.c_proj.weight") || ends("mlp.c_fc.weight") ||
           ends("mlp.c_proj.weight");
}

void transpose(const float* src, float* dst, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

}  // namespace

void write_tensors(const std::filesystem::path& file, const ParamLayout& layout, const float* flat,
                   Naming naming, const std::string& prefix,
                   const std::map<std::string, std::string>& metadata) {
    WEFT_CHECK(layout.tp == 1,
               "internal: {} would be written from one tensor-parallel shard; assemble the logical "
               "tensors first",
               file.string());
    std::vector<ckpt::TensorToWrite> out;
    std::vector<std::vector<float>> transposed;  // keeps transposed copies alive
    transposed.reserve(layout.tensors.size());
    for (const ParamSpec& p : layout.tensors) {
        ckpt::TensorToWrite t{prefix + p.name, p.shape, flat + p.offset};
        if (naming == Naming::hf) {
            t.name = "transformer." + p.name;
            if (is_conv1d(p.name)) {
                transposed.emplace_back(size_t(p.numel_logical()));
                transpose(flat + p.offset, transposed.back().data(), p.shape[0], p.shape[1]);
                t.shape = {p.shape[1], p.shape[0]};
                t.data = transposed.back().data();
            }
        }
        out.push_back(std::move(t));
    }
    ckpt::write_safetensors(file, out, metadata);
}

void read_tensors(const std::filesystem::path& file, const ParamLayout& layout, float* flat,
                  Naming naming, const std::string& prefix) {
    ckpt::SafetensorsFile st = ckpt::SafetensorsFile::open(file);
    std::vector<float> tmp;
    for (const ParamSpec& p : layout.tensors) {
        std::string name = prefix + p.name;
        std::vector<int64_t> shape = p.shape;
        bool transpose_in = false;
        if (naming == Naming::hf) {
            name = st.find("transformer." + p.name) ? "transformer." + p.name : p.name;
            if (is_conv1d(p.name)) {
                shape = {p.shape[1], p.shape[0]};
                transpose_in = true;
            }
        }
        WEFT_CHECK(st.find(name) != nullptr, "{}: tensor '{}' is missing (expected shape [{}])",
                   file.string(), name, fmt::join(shape, ", "));
        const auto& info = st.at(name);
        WEFT_CHECK(info.shape == shape, "{}: tensor '{}' has shape [{}], expected [{}]",
                   file.string(), name, fmt::join(info.shape, ", "), fmt::join(shape, ", "));
        // A tensor-parallel shard takes its slice of the logical tensor.
        const bool shard = layout.tp > 1;
        float* dst = flat + p.offset;
        if (transpose_in || shard) {
            tmp.resize(size_t(p.numel_logical()));
            st.read_f32(name, shape, tmp.data());
        }
        if (transpose_in) {
            std::vector<float> t(tmp.size());
            transpose(tmp.data(), t.data(), shape[0], shape[1]);
            tmp.swap(t);
        }
        if (shard) {
            take_shard(p, layout.tp_rank, layout.tp, tmp.data(), dst);
        } else if (transpose_in) {
            std::copy(tmp.begin(), tmp.end(), dst);
        } else {
            st.read_f32(name, shape, dst);
        }
    }
}

ModelConfig read_hf_model_config(const std::filesystem::path& dir) {
    ckpt::HfGpt2Config h = ckpt::read_hf_config(dir);
    ModelConfig c;
    c.n_embd = h.n_embd;
    c.n_layer = h.n_layer;
    c.n_head = h.n_head;
    c.n_positions = h.n_positions;
    c.vocab_size = h.vocab_size;
    c.ln_eps = float(h.layer_norm_epsilon);
    c.validate((dir / "config.json").string());
    return c;
}

void write_hf_model(const std::filesystem::path& dir, const ModelConfig& cfg,
                    const ParamLayout& layout, const float* flat) {
    ckpt::write_dir_atomic(dir, [&](const std::filesystem::path& tmp) {
        ckpt::HfGpt2Config h{cfg.n_embd,      cfg.n_layer,    cfg.n_head,
                             cfg.n_positions, cfg.vocab_size, cfg.ln_eps_decimal()};
        ckpt::write_hf_config(tmp, h);
        write_tensors(tmp / "model.safetensors", layout, flat, Naming::hf, "", {{"format", "pt"}});
    });
}

}  // namespace weft::model
