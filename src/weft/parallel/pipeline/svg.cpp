#include "weft/parallel/pipeline/svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <vector>

namespace weft::pipeline {

namespace {

constexpr double kLeft = 70, kRight = 20, kTop = 44, kRowHeight = 26, kRowGap = 6;
constexpr double kTargetWidth = 1200, kMaxWidth = 3600, kMinBoxWidth = 16;

// Mixes `rgb` towards white by `t` in [0, 1]: later local chunks of a rank are lighter.
std::string shade(unsigned rgb, double t) {
    auto mix = [t](unsigned c) { return static_cast<unsigned>(std::lround(c + (255 - c) * t)); };
    return fmt::format("#{:02x}{:02x}{:02x}", mix(rgb >> 16 & 0xff), mix(rgb >> 8 & 0xff),
                       mix(rgb & 0xff));
}

// Pixels per time unit: fit the picture to kTargetWidth, widened (up to kMaxWidth) until the
// shortest compute box can hold its label.
double pixels_per_unit(const SimResult& r) {
    if (r.makespan <= 0) return 1;
    double shortest = r.makespan;
    for (const auto& row : r.timeline)
        for (const TimedAction& t : row)
            if (t.action.is_compute() && t.end > t.start)
                shortest = std::min(shortest, t.end - t.start);
    double ppu = kTargetWidth / r.makespan;
    if (shortest * ppu < kMinBoxWidth)
        ppu = std::min(kMinBoxWidth / shortest, kMaxWidth / r.makespan);
    return ppu;
}

// Forward blue, backward (and B) orange, W green.
unsigned color(Action::Kind kind) {
    return kind == Action::forward           ? 0x2f6db5
           : kind == Action::backward_weight ? 0x3a9a4a
                                             : 0xd9661f;
}

// A tick step of 1, 2 or 5 times a power of ten giving about ten ticks.
double tick_step(double span) {
    if (span <= 0) return 1;
    const double raw = span / 10, base = std::pow(10.0, std::floor(std::log10(raw)));
    for (double f : {1.0, 2.0, 5.0})
        if (f * base >= raw) return f * base;
    return 10 * base;
}

}  // namespace

std::string schedule_svg(const Schedule& s, const SimResult& r) {
    const double ppu = pixels_per_unit(r);
    const double plot_w = r.makespan * ppu;
    const double width = kLeft + plot_w + kRight;
    const double rows_bottom = kTop + s.pp * (kRowHeight + kRowGap);
    const double height = rows_bottom + 60;
    auto x_of = [&](double t) { return kLeft + t * ppu; };

    std::string out;
    auto w = std::back_inserter(out);
    fmt::format_to(w,
                   "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
                   "viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"sans-serif\" font-size=\"11\">\n",
                   width, height, width, height);
    fmt::format_to(w, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
    std::string title =
        fmt::format("{} p={} m={}", format_schedule_kind(s.kind), s.pp, s.micro_batches);
    if (s.vpp > 1) title += fmt::format(" v={}", s.vpp);
    title += fmt::format(": bubble {:.2f}% (theory {:.2f}%), makespan {:g}", 100 * r.bubble,
                         100 * ideal_bubble(s.kind, s.pp, s.vpp, s.micro_batches), r.makespan);
    fmt::format_to(w, "<text x=\"{}\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
                   kLeft, title);

    for (int rank = 0; rank < s.pp; ++rank) {
        const double y = kTop + rank * (kRowHeight + kRowGap);
        fmt::format_to(w, "<g class=\"rank\" data-rank=\"{}\">\n", rank);
        fmt::format_to(w, "<text x=\"8\" y=\"{:.1f}\">rank {}</text>\n", y + kRowHeight * 0.65,
                       rank);
        // The background is what stays visible where the rank is idle.
        fmt::format_to(w,
                       "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" "
                       "fill=\"#e4e4e4\"><title>idle</title></rect>\n",
                       kLeft, y, plot_w, kRowHeight);
        for (const TimedAction& t : r.timeline[rank]) {
            const Action& a = t.action;
            const double x = x_of(t.start), bw = (t.end - t.start) * ppu;
            const std::string tip =
                fmt::format("{} [{:g}, {:g}]", format_action(a), t.start, t.end);
            if (a.is_send() && bw > 0) {
                fmt::format_to(w,
                               "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" "
                               "fill=\"#555555\"><title>{}</title></rect>\n",
                               x, y + kRowHeight * 0.75, bw, kRowHeight * 0.25, tip);
            }
            if (!a.is_compute()) continue;
            const int local = a.chunk / s.pp;
            const double t_shade = s.vpp > 1 ? 0.55 * local / (s.vpp - 1) : 0;
            const unsigned base = color(a.kind);
            fmt::format_to(w,
                           "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" "
                           "fill=\"{}\" stroke=\"white\" stroke-width=\"0.5\"><title>{}</title>"
                           "</rect>\n",
                           x, y, bw, kRowHeight, shade(base, t_shade), tip);
            const std::string label = fmt::format("{}", a.micro);
            if (bw >= 6.5 * label.size() + 2)
                fmt::format_to(w,
                               "<text x=\"{:.2f}\" y=\"{:.1f}\" text-anchor=\"middle\" "
                               "fill=\"{}\">{}</text>\n",
                               x + bw / 2, y + kRowHeight * 0.65,
                               local * 2 >= s.vpp && s.vpp > 1 ? "black" : "white", label);
        }
        fmt::format_to(w, "</g>\n");
    }

    // Time axis with ticks under the rows.
    const double ay = rows_bottom + 4;
    fmt::format_to(w,
                   "<g class=\"axis\">\n<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" "
                   "stroke=\"black\"/>\n",
                   kLeft, ay, x_of(r.makespan), ay);
    const double step = tick_step(r.makespan);
    for (int i = 0; i * step <= r.makespan * (1 + 1e-9); ++i) {
        const double x = x_of(i * step);
        fmt::format_to(w,
                       "<line x1=\"{:.2f}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" "
                       "stroke=\"black\"/>\n<text x=\"{:.2f}\" y=\"{:.1f}\" "
                       "text-anchor=\"middle\">{:g}</text>\n",
                       x, ay, x, ay + 5, x, ay + 17, i * step);
    }
    fmt::format_to(w, "<text x=\"8\" y=\"{:.1f}\">time</text>\n</g>\n", ay + 17);

    // Legend: forward and backward, one shade per local chunk.
    fmt::format_to(w, "<g class=\"legend\">\n");
    double lx = kLeft;
    const double ly = ay + 30;
    std::vector<Action::Kind> kinds = {Action::forward, Action::backward};
    if (s.split_backward())
        kinds = {Action::forward, Action::backward_input, Action::backward_weight};
    for (Action::Kind kind : kinds) {
        for (int local = 0; local < s.vpp; ++local) {
            const double t_shade = s.vpp > 1 ? 0.55 * local / (s.vpp - 1) : 0;
            fmt::format_to(w,
                           "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" "
                           "fill=\"{}\"/>\n",
                           lx, ly, shade(color(kind), t_shade));
            lx += 14;
        }
        std::string name = kind == Action::forward          ? "forward"
                           : kind == Action::backward       ? "backward"
                           : kind == Action::backward_input ? "B (input gradients)"
                                                            : "W (weight gradients)";
        if (s.vpp > 1) name += " (chunk 0..v-1, darker first)";
        fmt::format_to(w, "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", lx + 2, ly + 10, name);
        lx += 7.0 * name.size() + 24;
    }
    fmt::format_to(w, "</g>\n</svg>\n");
    return out;
}

}  // namespace weft::pipeline
