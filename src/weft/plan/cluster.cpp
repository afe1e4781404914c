#include "weft/plan/cluster.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include "weft/core/error.hpp"
#include "weft/plan/json_read.hpp"

namespace weft::plan {

namespace fs = std::filesystem;

double GemmEfficiency::operator()(double M, double N, double K) const {
    return max / (1 + m_half / M + n_half / N + k_half / K);
}

double Device::peak(const std::string& dtype) const {
    std::vector<std::string> names;
    for (const auto& [k, v] : peak_flops) {
        if (k == dtype) return v;
        names.push_back(k);
    }
    fail("device '{}' has no peak for dtype '{}' (its cluster file lists: {})", name, dtype,
         fmt::join(names, ", "));
}

GemmEfficiency Device::gemm_for(const std::string& dtype) const {
    for (const auto& [k, g] : gemm_by_dtype)
        if (k == dtype) return g;
    return gemm;
}

static GemmEfficiency read_gemm(const JsonReader& d, const std::string& key,
                                const std::string& file) {
    JsonReader g = d.object(key);
    g.only({"max", "m_half", "n_half", "k_half"});
    const GemmEfficiency e = {g.positive("max"), g.non_negative("m_half"), g.non_negative("n_half"),
                              g.non_negative("k_half")};
    WEFT_CHECK(e.max <= 1, "{}: device.{}.max must be at most 1, got {}", file, key, e.max);
    return e;
}

static Link read_link(const JsonReader& r, const std::string& key) {
    JsonReader l = r.object(key);
    l.only({"bandwidth_gbs", "latency_us"});
    return {l.positive("bandwidth_gbs") * 1e9, l.non_negative("latency_us") * 1e-6};
}

Cluster load_cluster(const fs::path& path) {
    JsonReader r = JsonReader::open(path);
    r.only({"name", "device", "devices_per_node", "nodes", "intra_node", "inter_node", "disk"});
    Cluster c;
    c.file = path.string();
    c.name = r.string("name");
    c.devices_per_node = int(r.integer("devices_per_node", 1));
    c.nodes = int(r.integer("nodes", 1));
    c.intra = read_link(r, "intra_node");
    c.inter = read_link(r, "inter_node");
    if (r.has("disk")) {
        JsonReader d = r.object("disk");
        d.only({"read_gbs", "write_gbs"});
        c.disk = {d.positive("read_gbs") * 1e9, d.positive("write_gbs") * 1e9};
    }

    JsonReader d = r.object("device");
    d.only({"name", "peak_tflops", "memory_gib", "memory_bandwidth_gbs", "gemm_efficiency",
            "gemm_efficiency_fp8", "attention_efficiency", "kernel_overhead_us", "runtime_gib"});
    Device& dev = c.device;
    dev.name = d.string("name");
    for (auto [k, v] : d.positive_map("peak_tflops")) dev.peak_flops.emplace_back(k, v * 1e12);
    dev.memory_bytes = d.positive("memory_gib") * double(1 << 30);
    dev.memory_bandwidth = d.positive("memory_bandwidth_gbs") * 1e9;
    dev.gemm = read_gemm(d, "gemm_efficiency", c.file);
    if (d.has("gemm_efficiency_fp8"))
        dev.gemm_by_dtype.emplace_back("fp8", read_gemm(d, "gemm_efficiency_fp8", c.file));
    dev.attention_efficiency = d.positive("attention_efficiency");
    WEFT_CHECK(dev.attention_efficiency <= 1,
               "{}: device.attention_efficiency must be at most 1, got {}", c.file,
               dev.attention_efficiency);
    dev.kernel_overhead = d.non_negative("kernel_overhead_us") * 1e-6;
    dev.runtime_bytes = d.non_negative("runtime_gib") * double(1 << 30);
    return c;
}

static fs::path exe_dir() {
    std::error_code ec;
    fs::path p = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::path() : p.parent_path();
}

fs::path find_cluster_file(const std::string& name_or_path) {
    if (fs::is_regular_file(name_or_path)) return name_or_path;
    const std::string file = name_or_path + ".json";
    std::vector<fs::path> tried = {fs::path("configs/clusters") / file};
    if (fs::path e = exe_dir(); !e.empty()) tried.push_back(e / "../configs/clusters" / file);
    for (const fs::path& p : tried)
        if (fs::is_regular_file(p)) return p;
    std::vector<std::string> names;
    for (const fs::path& p : tried) names.push_back(p.string());
    fail("--cluster '{}': no such file, and no preset found at {}", name_or_path,
         fmt::join(names, " or "));
}

}  // namespace weft::plan
