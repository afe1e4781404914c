#pragma once
// How long a cache line written on one core takes to reach another: the price every product
// pays when its threads share its input and its output (docs/serving.md, "What the fast window
// is"). On this host it is 32-55 ns when the guest's two cores share a core complex, 160-400 ns
// when the host places them on two, and a 16-row pass of the 135M model's products then takes a
// fifth longer; a virtual machine's placement can change from one few seconds to the next.
#include <vector>

namespace weft::kernels {

// One way, ns: two threads pinned to `cpu_a` and `cpu_b` pass one line back and forth `passes`
// times (each pass two handoffs).
double core_handoff_ns(int cpu_a, int cpu_b, int passes);

// The CPUs this process may run on, in order.
std::vector<int> allowed_cpus();

}  // namespace weft::kernels
