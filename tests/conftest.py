"""What every test shares: the layout of this tree, and the fixtures pytest applies.

The tests are kept by feature, one folder per area of remat:

* ``core/``: the tape, the reverse sweep, rm.grad, the guards and the public API;
* ``ops/``: the op table (every op gradchecked from ``ops/cases.py``), NN helpers,
  dtypes, extreme inputs, devices;
* ``forward/``: rm.jvp (dual numbers and the recorded sweep), rm.hvp, second order;
* ``schedules/``: the pure schedules (revolve, online, optimal, disk levels) and simulate;
* ``executor/``: checkpointed loops, chains and scans, the replay check, reversible steps;
* ``checkpoint/``: rm.checkpoint, policies, the recompute guard;
* ``budgets/``: byte budgets (``rm.Tape(memory=)``) and what they count;
* ``storage/``: disk snapshots;
* ``tools/``: the command line, plots, benchmarks, notebooks, workloads.

Shared code lives in modules, never in test files: ``strategies.py`` (hypothesis
strategies, the one random-program generator), ``helpers.py`` (tapes by schedule
name, tracemalloc measurement), ``ops/cases.py`` (the op table's cases) and
``schedules/oracles.py`` (exhaustive searches).  A test that guards a bug says
which in a one-line comment above it.

``python -m pytest -m "not slow"`` is the quick loop; ``python -m pytest`` runs all.
"""

import pytest

from remat import memory


@pytest.fixture(autouse=True)
def fresh_plans():
    """Each test starts and ends with an empty cache of byte-budget plans, so none
    depends on a plan another test measured (tests are independent of their order)."""
    memory.clear_plans()
    yield
    memory.clear_plans()
