"""The run layer's overhead for both families in one run: the collective loop (ResNet50 against
bench/bare_resnet50.py) and the parameter-server driver (CTR tiny and full against
bench/bare_ctr.py), each alternated with its bare twin R times; one ratio per line at the end.
Measure on a quiet machine: other work slows whichever job it meets.

    python bench/overhead.py [--repeats 3] [--collective-preset small] [--nproc 2]
"""
import argparse

import loop_overhead
import pairs
import ps_overhead


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--collective-preset", default="small")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--full-rows", type=int, default=100000)
    args = parser.parse_args()
    ratios = {f"collective resnet50 {args.collective_preset}":
              loop_overhead.measure(args.nproc, args.repeats, args.collective_preset)}
    for preset in ("tiny", "full"):
        sets = ps_overhead.preset_sets(preset, args.passes, args.full_rows)
        ratios[f"ps ctr {preset}"] = ps_overhead.measure(preset, sets, args.repeats)
    print("\nfleetbench / bare throughput (target >= %.2f):" % pairs.TARGET)
    for label, ratio in ratios.items():
        print(f"  {label:32s} {ratio:.4f} {'ok' if ratio >= pairs.TARGET else 'BELOW TARGET'}")


if __name__ == "__main__":
    main()
