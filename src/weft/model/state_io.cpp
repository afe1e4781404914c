#include "weft/model/state_io.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <set>
#include <span>
#include <vector>

#include "weft/ckpt/atomic.hpp"
#include "weft/ckpt/hf_llama_config.hpp"
#include "weft/ckpt/hf_weights.hpp"
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

// `pattern` with `index` in place of its "{}" (HfTensorName::per_index).
std::string indexed_name(const std::string& pattern, int64_t index) {
    std::string name = pattern;
    const size_t at = name.find("{}");
    WEFT_CHECK(at != std::string::npos, "internal: tensor name pattern '{}' has no {{}}", pattern);
    return name.replace(at, 2, std::to_string(index));
}

}  // namespace

namespace {

// The tensors of `flat` as a file holds them, named and oriented by `naming`; `transposed` keeps
// the transposed copies alive.
std::vector<ckpt::TensorToWrite> tensors_to_write(const std::string& where, const ModelConfig& cfg,
                                                  const ParamLayout& layout, const float* flat,
                                                  Naming naming, const std::string& prefix,
                                                  std::vector<std::vector<float>>& transposed) {
    WEFT_CHECK(layout.tp == 1,
               "internal: {} would be written from one tensor-parallel shard; assemble the logical "
               "tensors first",
               where);
    std::vector<ckpt::TensorToWrite> out;
    transposed.reserve(layout.tensors.size());
    for (const ParamSpec& p : layout.tensors) {
        ckpt::TensorToWrite t{prefix + p.name, p.shape, flat + p.offset};
        if (naming == Naming::hf) {
            const HfTensorName hf = family_of(cfg).hf_tensor(cfg, p);
            if (hf.per_index) {
                const int64_t n = p.shape[0], per = p.numel_logical() / n;
                const std::vector<int64_t> shape(p.shape.begin() + 1, p.shape.end());
                for (int64_t i = 0; i < n; ++i)
                    out.push_back({indexed_name(hf.name, i), shape, flat + p.offset + i * per});
                continue;
            }
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
    return out;
}

}  // namespace

void write_tensors(const std::filesystem::path& file, const ModelConfig& cfg,
                   const ParamLayout& layout, const float* flat, Naming naming,
                   const std::string& prefix, const std::map<std::string, std::string>& metadata) {
    std::vector<std::vector<float>> transposed;
    ckpt::write_safetensors(
        file, tensors_to_write(file.string(), cfg, layout, flat, naming, prefix, transposed),
        metadata);
}

namespace {

int64_t numel(std::span<const int64_t> shape) {
    return std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<>());
}

// The tensors of one safetensors file or of a Hugging Face directory (single file or shards), as
// read_into sees them. Weights must be finite: a NaN would load silently and show up only as a
// diverged first step.
struct FileSource {
    const ckpt::SafetensorsFile& f;
    bool has(const std::string& n) const { return f.find(n) != nullptr; }
    const std::vector<int64_t>& shape(const std::string& n) const { return f.at(n).shape; }
    void read(const std::string& n, std::span<const int64_t> s, float* out) const {
        f.read_f32(n, s, out);
        ckpt::check_finite_tensor({out, size_t(numel(s))}, n, f.path().string());
    }
};
struct DirSource {
    const ckpt::HfWeights& w;
    bool has(const std::string& n) const { return w.has(n); }
    const std::vector<int64_t>& shape(const std::string& n) const { return w.info(n).shape; }
    void read(const std::string& n, std::span<const int64_t> s, float* out) const {
        w.read_f32(n, s, out);
        ckpt::check_finite_tensor({out, size_t(numel(s))}, n, w.file_of(n).string());
    }
};

// What errors about a directory's weights name: the file of a single-file model, else the index.
std::filesystem::path hf_weights_where(const ckpt::HfWeights& w) {
    return w.files().size() == 1 ? w.files()[0].path() : w.dir() / ckpt::kHfWeightsIndexFile;
}

// The name `p` has in `src`: Hugging Face's (hf.name), or the family's own when only that is
// there (a file saved from the bare model, without "transformer." / "model."). A missing tensor
// is named as Hugging Face names it.
template <class Source>
std::string stored_name(const Source& src, const HfTensorName& hf, const ParamSpec& p) {
    return src.has(hf.name) || !src.has(p.name) ? hf.name : p.name;
}

// The shape of `p`'s tensor(s) in a Hugging Face file: [in, out] when stored transposed, one
// row's shape when stored per index.
std::vector<int64_t> hf_shape(const HfTensorName& hf, const ParamSpec& p) {
    if (hf.per_index) return {p.shape.begin() + 1, p.shape.end()};
    if (hf.transposed) return {p.shape[1], p.shape[0]};
    return p.shape;
}

template <class Source>
void check_tensor(const Source& src, const std::string& where, const std::string& name,
                  const std::vector<int64_t>& shape) {
    WEFT_CHECK(src.has(name), "{}: tensor '{}' is missing (expected shape [{}])", where, name,
               fmt::join(shape, ", "));
    WEFT_CHECK(src.shape(name) == shape, "{}: tensor '{}' has shape [{}], expected [{}]", where,
               name, fmt::join(src.shape(name), ", "), fmt::join(shape, ", "));
}

template <class Source>
void read_into(const Source& src, const std::string& where, const ModelConfig& cfg,
               const ParamLayout& layout, float* flat, Naming naming, const std::string& prefix) {
    std::vector<float> tmp;
    for (const ParamSpec& p : layout.tensors) {
        std::string name = prefix + p.name;
        std::vector<int64_t> shape = p.shape;
        bool transpose_in = false;
        if (naming == Naming::hf) {
            const HfTensorName hf = family_of(cfg).hf_tensor(cfg, p);
            if (hf.per_index) {
                // One file tensor per index of the first dimension, into consecutive blocks.
                // Expert tensors are whole on every tp rank; only their ep slice is partial.
                WEFT_CHECK(p.tp_dim < 0, "internal: {} read into a tensor-parallel shard", hf.name);
                // An expert-parallel shard holds rows [first_row, first_row + held) of them.
                const int64_t n = p.shape[0], per = p.numel_logical() / n;
                const int64_t held = p.numel_stored / per;
                const std::vector<int64_t> part = hf_shape(hf, p);
                for (int64_t i = p.first_row; i < p.first_row + held; ++i) {
                    const std::string each = indexed_name(hf.name, i);
                    check_tensor(src, where, each, part);
                    src.read(each, part, flat + p.offset + (i - p.first_row) * per);
                }
                continue;
            }
            name = stored_name(src, hf, p);
            shape = hf_shape(hf, p);
            transpose_in = hf.transposed;
        }
        check_tensor(src, where, name, shape);
        // A tensor-parallel shard takes its slice of the logical tensor.
        const bool shard = layout.tp > 1;
        float* dst = flat + p.offset;
        if (transpose_in || shard) {
            tmp.resize(size_t(p.numel_logical()));
            src.read(name, shape, tmp.data());
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
            src.read(name, shape, dst);
        }
    }
}

}  // namespace

void read_tensors(const std::filesystem::path& file, const ModelConfig& cfg,
                  const ParamLayout& layout, float* flat, Naming naming,
                  const std::string& prefix) {
    ckpt::SafetensorsFile st = ckpt::SafetensorsFile::open(file);
    read_into(FileSource{st}, file.string(), cfg, layout, flat, naming, prefix);
}

ckpt::HfWeights open_hf_weights(const std::filesystem::path& dir, const ModelConfig& cfg) {
    ckpt::HfWeights w = ckpt::HfWeights::open(dir);
    const DirSource src{w};
    const std::string where = hf_weights_where(w).string();
    const Family& family = family_of(cfg);
    // Every tensor the whole model reads, checked as read_into will (on every rank, whatever
    // part it reads) so that a missing tensor is named before an extra one replacing it.
    std::set<std::string, std::less<>> read;
    for (const ParamSpec& p : build_param_layout(cfg).tensors) {
        const HfTensorName hf = family.hf_tensor(cfg, p);
        const std::vector<int64_t> shape = hf_shape(hf, p);
        const int64_t n = hf.per_index ? p.shape[0] : 1;
        for (int64_t i = 0; i < n; ++i) {
            const std::string name =
                hf.per_index ? indexed_name(hf.name, i) : stored_name(src, hf, p);
            check_tensor(src, where, name, shape);
            read.insert(name);
        }
    }
    auto ignored = [&](std::string_view name) {
        return std::ranges::any_of(family.hf_ignored,
                                   [&](const std::string& end) { return name.ends_with(end); });
    };
    std::vector<std::string> unread;
    for (const std::string& name : w.names())
        if (!read.contains(name) && !ignored(name)) unread.push_back("'" + name + "'");
    // transformers would load the model without them, with a warning; a model of other sizes
    // than its weights is more likely a config.json from another model than what was meant.
    const size_t shown = std::min<size_t>(unread.size(), 3);
    WEFT_CHECK(unread.empty(),
               "{} holds {} tensor{} that the model of {} does not have: {}{} (expected exactly "
               "that model's tensors: do config.json and the weights belong together?)",
               where, unread.size(), unread.size() == 1 ? "" : "s", (dir / "config.json").string(),
               fmt::join(unread.begin(), unread.begin() + ptrdiff_t(shown), ", "),
               unread.size() > shown ? fmt::format(" and {} more", unread.size() - shown) : "");
    return w;
}

void read_hf_weights(const ckpt::HfWeights& w, const ModelConfig& cfg, const ParamLayout& layout,
                     float* flat) {
    read_into(DirSource{w}, hf_weights_where(w).string(), cfg, layout, flat, Naming::hf, "");
}

ModelConfig read_hf_model_config(const std::filesystem::path& dir) {
    return family_for_hf(ckpt::read_hf_model_id(dir), (dir / "config.json").string())
        .read_hf_config(dir);
}

void write_hf_model(const std::filesystem::path& dir, const ModelConfig& cfg,
                    const ParamLayout& layout, const float* flat) {
    ckpt::write_dir_atomic(dir, [&](const std::filesystem::path& tmp) {
        family_of(cfg).write_hf_config(tmp, cfg);
        // One model.safetensors, or shards of at most 5 GB with an index, as transformers'
        // save_pretrained writes them.
        std::vector<std::vector<float>> transposed;
        ckpt::write_hf_weights(
            tmp, tensors_to_write(dir.string(), cfg, layout, flat, Naming::hf, "", transposed));
    });
}

}  // namespace weft::model
