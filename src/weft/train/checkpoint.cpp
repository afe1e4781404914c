#include "weft/train/checkpoint.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "weft/ckpt/checkpoint_dir.hpp"
#include "weft/ckpt/resident_pages.hpp"
#include "weft/ckpt/safetensors.hpp"
#include "weft/core/error.hpp"
#include "weft/train/manifest_check.hpp"

namespace weft::train {

namespace fs = std::filesystem;

const char* state_name(StateTensors which) {
    switch (which) {
        case StateTensors::params:
            return "param";
        case StateTensors::exp_avg:
            return "exp_avg";
        case StateTensors::exp_avg_sq:
            return "exp_avg_sq";
    }
    return "?";
}

std::vector<OwnedRange> owned_ranges(const parallel::ZeroLayout& z, const std::vector<bool>& owned,
                                     int tp_rank) {
    const model::ParamLayout& padded = z.padded();
    std::vector<OwnedRange> out;
    for (int u = 0; u < z.units(); ++u) {
        const model::Unit& unit = padded.units[size_t(u)];
        if (!owned[size_t(u)] || !unit.held || unit.tensors == 0) continue;
        for (int i = z.first_slice(u); i < z.first_slice(u + 1); ++i) {
            const parallel::ShardSlice& s = z.slices()[size_t(i)];
            for (int t = unit.first_tensor; t < unit.first_tensor + unit.tensors; ++t) {
                const model::ParamSpec& p = padded.tensors[size_t(t)];
                if (p.tp_dim < 0 && tp_rank != 0) continue;
                const int64_t b = std::max(s.begin, p.offset);
                const int64_t e = std::min(s.begin + s.size, p.offset + p.numel_stored);
                if (b < e) out.push_back({&p, b - p.offset, e - p.offset, b, u});
            }
        }
    }
    return out;
}

std::vector<ckpt::ShardRange> shard_ranges(const std::vector<OwnedRange>& owned) {
    std::vector<ckpt::ShardRange> out;
    for (StateTensors which : kStateTensorOrder)
        for (const OwnedRange& r : owned)
            out.push_back({state_name(which), r.spec->name, r.begin, r.end});
    return out;
}

nlohmann::json manifest_tensors(const model::ModelConfig& cfg) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const model::ParamSpec& t : model::build_param_layout(cfg).tensors)
        tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"tp_dim", t.tp_dim}});
    return tensors;
}

namespace {

CheckpointInfo open_manifest(const fs::path& dir) {
    CheckpointInfo ck;
    ck.dir = dir;
    ck.manifest = ckpt::read_manifest(dir);
    const std::string where = (dir / ckpt::kManifestFile).string();
    ck.cfg = check_manifest_model(ck.manifest, where);
    ck.state = ck.manifest.run;
    ck.state["step"] = ck.manifest.step;
    return ck;
}

}  // namespace

CheckpointInfo open_checkpoint(const fs::path& dir_or_run) {
    CheckpointInfo ck = open_manifest(ckpt::resolve_checkpoint(dir_or_run));
    if (auto problem = ckpt::check_shards(ck.dir, ck.manifest))
        fail("checkpoint {} is damaged: {}", ck.dir.string(), *problem);
    return ck;
}

std::optional<ResumePoint> open_resume_checkpoint(const fs::path& run_dir) {
    const std::optional<fs::path> latest = ckpt::find_latest(run_dir);
    if (!latest) return std::nullopt;
    const std::optional<int64_t> latest_step = ckpt::parse_step_name(latest->filename().string());
    // `latest` first, then the committed ones before it, newest first.
    std::vector<fs::path> candidates = {*latest};
    for (const auto& [step, dir] : ckpt::list_checkpoints(run_dir))
        if (step < *latest_step) candidates.push_back(dir);
    std::string damaged;
    for (const fs::path& dir : candidates) {
        std::optional<std::string> problem;
        std::optional<CheckpointInfo> ck;
        try {
            ck = open_manifest(dir);
            problem = ckpt::check_shards(dir, ck->manifest);
        } catch (const Error& e) {
            // Only the newest may be mid-way; an older one without a manifest was never
            // committed and is skipped quietly.
            if (dir != *latest) continue;
            problem = e.what();
        }
        if (!problem) {
            ResumePoint rp{std::move(*ck), {}};
            if (!damaged.empty())
                rp.warning = fmt::format(
                    "checkpoint {} is damaged ({}); resuming from the previous committed "
                    "checkpoint {}",
                    latest->string(), damaged, dir.string());
            return rp;
        }
        if (dir == *latest) {
            damaged = *problem;
        }
    }
    fail(
        "checkpoint {} is damaged ({}) and {} holds no earlier intact committed checkpoint to "
        "resume from",
        latest->string(), damaged, run_dir.string());
}

struct CheckpointReader::Mapped {
    void* map = nullptr;
    size_t size = 0;
    ~Mapped() {
        if (map) ::munmap(map, size);
    }
};

model::ParamLayout writer_param_layout(const model::ModelConfig& cfg, int tp_rank, int tp,
                                       int ep_rank, int ep) {
    model::ModelShard shard;
    shard.tp_rank = tp_rank;
    shard.tp = tp;
    shard.ep_rank = ep_rank;
    shard.ep = ep;
    // The writer padded the vocabulary as its tensor-parallel degree does.
    return model::build_param_layout(model::config_for_tp(cfg, tp), shard);
}

CheckpointReader::CheckpointReader(const CheckpointInfo& ck) : ck_(ck) {
    for (size_t s = 0; s < ck_.manifest.shards.size(); ++s) {
        const ckpt::ShardEntry& e = ck_.manifest.shards[s];
        const fs::path path = ck_.dir / e.file;
        auto m = std::make_unique<Mapped>();
        if (e.bytes > 0) {
            const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
            WEFT_CHECK(fd >= 0, "cannot open checkpoint shard {}", path.string());
            struct stat sb {};
            const bool sized = ::fstat(fd, &sb) == 0 && sb.st_size == e.bytes;
            if (sized) m->map = ::mmap(nullptr, size_t(e.bytes), PROT_READ, MAP_PRIVATE, fd, 0);
            ::close(fd);
            WEFT_CHECK(sized, "checkpoint shard {} does not hold the {} bytes its manifest says",
                       path.string(), e.bytes);
            WEFT_CHECK(m->map != MAP_FAILED, "cannot map checkpoint shard {}", path.string());
            m->size = size_t(e.bytes);
        }
        const float* data = static_cast<const float*>(m->map);
        int64_t at = 0;
        for (const ckpt::ShardRange& r : e.ranges) {
            pieces_[{r.state, r.tensor}].push_back({int(s), r.begin, r.end, data + at});
            at += r.floats();
        }
        files_.push_back(std::move(m));
    }
}

CheckpointReader::~CheckpointReader() = default;

void CheckpointReader::release(const Piece& piece) const {
    // Once copied, a piece's mapped pages would only hold the model twice at the read's peak.
    const Mapped& m = *files_[size_t(piece.shard)];
    ckpt::drop_resident_pages(m.map, m.size, piece.data,
                              size_t(piece.end - piece.begin) * sizeof(float));
}

const model::ParamLayout& CheckpointReader::writer_layout(int tp_rank, int tp, int ep_rank,
                                                          int ep) const {
    const std::array<int, 4> key{tp_rank, tp, ep_rank, ep};
    auto it = writer_layouts_.find(key);
    if (it != writer_layouts_.end()) return it->second;
    return writer_layouts_.emplace(key, writer_param_layout(ck_.cfg, tp_rank, tp, ep_rank, ep))
        .first->second;
}

void CheckpointReader::read(StateTensors which, const model::ParamLayout& layout,
                            float* flat) const {
    std::vector<float> logical;
    for (const model::ParamSpec& p : layout.tensors) {
        const int64_t n = p.numel_logical();
        logical.assign(size_t(n), 0.0f);
        int64_t filled = 0;
        auto it = pieces_.find({state_name(which), p.name});
        if (it != pieces_.end()) {
            for (const Piece& piece : it->second) {
                const ckpt::ShardEntry& e = ck_.manifest.shards[size_t(piece.shard)];
                const model::ParamSpec& w =
                    writer_layout(e.tp_rank, e.tp, e.ep_rank, e.ep).find(p.name);
                WEFT_CHECK(piece.end <= w.numel_stored,
                           "{}: {} range [{}, {}) of {} exceeds its {} elements at tp rank {} of "
                           "{}",
                           (ck_.dir / e.file).string(), state_name(which), piece.begin, piece.end,
                           p.name, w.numel_stored, e.tp_rank, e.tp);
                model::for_each_logical_run(w, e.tp_rank, e.tp, piece.begin, piece.end,
                                            [&](int64_t i, int64_t j, int64_t len) {
                                                std::copy_n(piece.data + (i - piece.begin), len,
                                                            logical.data() + j);
                                                filled += len;
                                            });
                release(piece);
            }
        }
        // Each element is stored once, so the count says whether all of them are there.
        WEFT_CHECK(filled == n,
                   "checkpoint {} holds {} of the {} elements of {} ({}); expected all of them",
                   ck_.dir.string(), filled, n, p.name, state_name(which));
        ckpt::check_finite_tensor(logical, fmt::format("{} ({})", p.name, state_name(which)),
                                  ck_.dir.string());
        model::take_shard(p, layout.tp_rank, layout.tp, logical.data(), flat + p.offset);
    }
}

void load_checkpoint_params(const CheckpointInfo& ck, const model::ParamLayout& layout,
                            float* params) {
    CheckpointReader(ck).read(StateTensors::params, layout, params);
}

}  // namespace weft::train
