"""remat/schedules/ stands alone: copied into another project, it imports and plans.

The folder is copied by itself into an empty directory under another name and
imported there as a top-level package, in a fresh interpreter where ``remat``
cannot be imported (NumPy is the one thing it may use).  There it builds and
simulates a Revolve and an Optimal schedule, which must be those the package
makes inside remat, action for action.
"""

import json
import math
import pathlib
import shutil
import subprocess
import sys

import remat
from remat import schedules

SOURCE = pathlib.Path(remat.__file__).parent / "schedules"

# Run in the copy: `import remat` fails there, so any import reaching outside the
# folder (absolute, or relative above it) raises ImportError.
SCRIPT = """
import json, sys
sys.modules["remat"] = None  # remat is not installed in the other engine
sys.path.insert(0, sys.argv[1])
import plans
from plans import ChainCosts, Optimal, Revolve, simulate

revolve = Revolve(steps=20, snapshots=4)
costs = ChainCosts(
    forward_time=(1.0, 2.0, 1.5, 1.0, 3.0, 1.0, 2.0, 1.0),
    reverse_time=(3.0, 5.0, 4.0, 3.0, 8.0, 3.0, 5.0, 3.0),
    state_bytes=(10, 40, 20, 10, 30, 10, 20, 40, 10),
    tape_bytes=(50, 90, 60, 40, 80, 30, 70, 60),
)
optimal = Optimal(costs, memory=200)
print(json.dumps({
    "revolve": [repr(a) for a in Revolve(steps=20, snapshots=4)],
    "revolve_forward_steps": simulate(revolve).forward_steps,
    "optimal": [repr(a) for a in optimal],
    "optimal_time": simulate(optimal, costs=costs).time,
    "file": plans.__file__,
}))
"""


def test_the_schedules_folder_imports_and_plans_on_its_own(tmp_path):
    # Guards issue 25: schedules/optimal.py and mixed.py imported remat.planning.
    shutil.copytree(SOURCE, tmp_path / "plans", ignore=shutil.ignore_patterns("__pycache__"))
    run = subprocess.run(
        [sys.executable, "-I", "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["file"].startswith(str(tmp_path))

    # Revolve: Griewank's count T(n, s) = n + r n - C(s + r, s + 1), r the repetition number.
    n, s = 20, 4
    r = next(r for r in range(n) if math.comb(s + r, s) >= n)
    assert got["revolve_forward_steps"] == n + r * n - math.comb(s + r, s + 1)
    assert got["revolve"] == [repr(a) for a in schedules.Revolve(steps=20, snapshots=4)]

    costs = schedules.ChainCosts(
        forward_time=(1.0, 2.0, 1.5, 1.0, 3.0, 1.0, 2.0, 1.0),
        reverse_time=(3.0, 5.0, 4.0, 3.0, 8.0, 3.0, 5.0, 3.0),
        state_bytes=(10, 40, 20, 10, 30, 10, 20, 40, 10),
        tape_bytes=(50, 90, 60, 40, 80, 30, 70, 60),
    )
    plan = schedules.Optimal(costs, memory=200)
    assert got["optimal"] == [repr(a) for a in plan]
    assert got["optimal_time"] == schedules.simulate(plan, costs=costs).time
    assert got["optimal_time"] > sum(costs.reverse_time)  # 200 bytes cannot store all
