"""Call overhead at 8 floats in interleaved rounds: every method once per round, medians over
the rounds, so that a slow spell of the machine hits all methods alike (bench.py measures each
method once).

    .venv/bin/python benchmarks/overhead.py [ROUNDS]     # 11 rounds by default, about a minute
"""

from __future__ import annotations

import sys
from pathlib import Path

from torch.utils import benchmark

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import overhead_cases  # noqa: E402  (loads the built library)


def main(rounds: int = 11) -> int:
    cases = overhead_cases()
    times: dict[tuple[str, bool], list[float]] = {(name, grad): [] for name in cases for grad in (False, True)}
    for _ in range(rounds):
        for name, fns in cases.items():
            for grad in (False, True):
                calls = 5000 if "custom_op" in name else 20000
                timer = benchmark.Timer(stmt="fn()", globals={"fn": fns[grad]})
                times[(name, grad)].append(timer.timeit(calls).median * 1e6)
    median = {key: sorted(v)[len(v) // 2] for key, v in times.items()}
    base = next(iter(cases))
    print(f"call overhead, 8 floats, median of {rounds} interleaved rounds (us; ratio to {base}):")
    for name in cases:
        plain, grad = median[(name, False)], median[(name, True)]
        print(f"  {name:26} {plain:7.2f} ({plain / median[(base, False)]:.2f}x)   with grad {grad:7.2f} "
              f"({grad / median[(base, True)]:.2f}x)")
    custom = median[("Python custom_op", False)], median[("Python custom_op", True)]
    for name in ("torch.ops (generated)", "typed API (generated)"):
        print(f"  Python custom_op / {name}: {custom[0] / median[(name, False)]:.1f}x, "
              f"with grad {custom[1] / median[(name, True)]:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 11))
