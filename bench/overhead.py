"""The run layer's overhead for both families in one run, each at tiny and full: the collective loop
(ResNet50 against bench/bare_resnet50.py) and the parameter-server driver (CTR against
bench/bare_ctr.py), each paired with its bare twin R times in a random order per pair (bench/pairs.py);
one ratio per line at the end, with its 95 % confidence interval. fleetbench runs as a user's run
does: the machine-speed probe and the per-step times on (their defaults). Measure on a quiet
machine: other work slows whichever job it meets.

    python bench/overhead.py [--repeats 5] [--collective-presets tiny full] [--full-steps 30] [--nproc 2]
"""
import argparse

import loop_overhead
import pairs
import ps_overhead


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--collective-presets", nargs="+", default=["tiny", "full"])
    # ResNet50 full (224 px, batch 32) takes seconds a step on a CPU: its pairs run this many steps
    parser.add_argument("--full-steps", type=int, default=30)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--ps-presets", nargs="+", default=["tiny", "full"])
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--full-rows", type=int, default=100000)
    parser.add_argument("--seed", type=int, default=0, help="the pairs' random order")
    args = parser.parse_args()
    ratios = {}
    for preset in args.collective_presets:
        extra = [f"steps={args.full_steps}", "warmup_steps=5"] if preset == "full" else []
        ratios[f"collective resnet50 {preset}"] = loop_overhead.measure(args.nproc, args.repeats, preset, extra,
                                                                        args.seed)
    for preset in args.ps_presets:
        sets = ps_overhead.preset_sets(preset, args.passes, args.full_rows)
        ratios[f"ps ctr {preset}"] = ps_overhead.measure(preset, sets, args.repeats, args.seed)
    print("\nfleetbench / bare throughput, geometric mean of the pairs (target >= %.2f):" % pairs.TARGET)
    for label, (ratio, low, high) in ratios.items():
        verdict = "ok" if low >= pairs.TARGET else "ok (interval reaches below)" if ratio >= pairs.TARGET else "BELOW TARGET"
        print(f"  {label:32s} {ratio:.4f}  95% CI [{low:.4f}, {high:.4f}]  {verdict}")


if __name__ == "__main__":
    main()
