#include "weft/model/state_io.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "weft/ckpt/atomic.hpp"
#include "weft/ckpt/hf_config.hpp"
#include "weft/ckpt/safetensors.hpp"
#include "weft/core/error.hpp"
#include "weft/model/family.hpp"

namespace weft::model {

namespace {

void transpose(const float* src, float* dst, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

}  // namespace

void write_tensors(const std::filesystem::path& file, const ModelConfig& cfg,
                   const ParamLayout& layout, const float* flat, Naming naming,
                   const std::string& prefix, const std::map<std::string, std::string>& metadata) {
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
            const HfTensorName hf = family_of(cfg).hf_tensor(cfg, p);
            t.name = hf.name;
            if (hf.transposed) {
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

void read_tensors(const std::filesystem::path& file, const ModelConfig& cfg,
                  const ParamLayout& layout, float* flat, Naming naming,
                  const std::string& prefix) {
    ckpt::SafetensorsFile st = ckpt::SafetensorsFile::open(file);
    std::vector<float> tmp;
    for (const ParamSpec& p : layout.tensors) {
        std::string name = prefix + p.name;
        std::vector<int64_t> shape = p.shape;
        bool transpose_in = false;
        if (naming == Naming::hf) {
            // Files name tensors with the model's prefix ("transformer.", "model.") or without.
            const HfTensorName hf = family_of(cfg).hf_tensor(cfg, p);
            name = st.find(hf.name) ? hf.name : p.name;
            if (hf.transposed) {
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

// TEMPORARY until ckpt::read_hf_model_type lands.
static std::string hf_model_type(const std::filesystem::path& dir) {
    std::ifstream in(dir / "config.json");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (...) {
        return "gpt2";
    }
    return j.is_object() && j.contains("model_type") && j["model_type"].is_string()
               ? j["model_type"].get<std::string>()
               : "gpt2";
}

ModelConfig read_hf_model_config(const std::filesystem::path& dir) {
    const std::string model_type = hf_model_type(dir);
    return family_for_hf_type(model_type, (dir / "config.json").string()).read_hf_config(dir);
}

void write_hf_model(const std::filesystem::path& dir, const ModelConfig& cfg,
                    const ParamLayout& layout, const float* flat) {
    ckpt::write_dir_atomic(dir, [&](const std::filesystem::path& tmp) {
        family_of(cfg).write_hf_config(tmp, cfg);
        write_tensors(tmp / "model.safetensors", cfg, layout, flat, Naming::hf, "",
                      {{"format", "pt"}});
    });
}

}  // namespace weft::model
