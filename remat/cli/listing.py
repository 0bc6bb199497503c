"""``remat schedule``: one schedule's actions and totals, and its diagram."""

from __future__ import annotations

import sys

from .. import schedules as S
from .common import environment, write_csv, write_json


def _actions(sched, steps, online):
    """The schedule's actions, finishing an online schedule after ``steps`` steps."""
    actions = iter(sched)
    for action in actions:
        yield action
        if online and isinstance(action, S.Tape) and action.stop == steps:
            actions.finish(steps)


def _action_dict(action):
    return {"action": type(action).__name__, **dict(zip(action._fields, action))}


DISK_SCHEDULES = ("two_level", "disk_revolve")
LISTED = (*S.SCHEDULE_NAMES, "optimal", *DISK_SCHEDULES)  # what --schedule takes
NEEDS_SNAPSHOTS = ("periodic", "revolve", "online", "mixed", "optimal", *DISK_SCHEDULES)
DISK_COST = 2.0  # --write-cost and --read-cost of the disk schedules, unless given
# The unit costs "optimal" plans a loop with: a step evaluation takes 1, a taped step with
# its reversal 2; a state holds 1 unit of memory, a step's tape 2 (its input and one more).
UNIT_COSTS = dict(forward_time=1.0, reverse_time=2.0, state_bytes=1, tape_bytes=2)


def _refusal(args):
    """What is wrong with the options given for ``--schedule`` (None if nothing)."""
    name = args.schedule
    if name in NEEDS_SNAPSHOTS and args.snapshots is None:
        return f"--schedule {name} needs --snapshots"
    if name not in NEEDS_SNAPSHOTS and args.snapshots is not None:
        return f"--schedule {name} takes no --snapshots"
    if name == "two_level" and args.disk_snapshots is None:
        return "--schedule two_level needs --disk-snapshots (disk slots besides the memory ones)"
    if name != "two_level" and args.disk_snapshots is not None:
        return f"--schedule {name} takes no --disk-snapshots (only two_level has disk slots)"
    given = {"--write-cost": args.write_cost, "--read-cost": args.read_cost}
    given = [option for option, value in given.items() if value is not None]
    if given and name not in DISK_SCHEDULES:
        return f"--schedule {name} takes no {given[0]} (only two_level and disk_revolve use disk)"
    return None


def build(args):
    """The schedule the options ask for, and one sentence comparing it with its optimum."""
    n, s, name = args.steps, args.snapshots, args.schedule
    if name == "optimal":
        costs = S.ChainCosts.uniform(n, **UNIT_COSTS)
        revolve = S.simulate(S.Revolve(n, s), costs=costs)
        plan = S.Optimal(costs, memory=revolve.peak_bytes)
        return (
            plan,
            costs,
            (
                f"planned in the memory Revolve(steps={n}, snapshots={s}) holds "
                f"({revolve.peak_bytes:g} units: a state 1, a tape 2), where revolve takes "
                f"{revolve.forward_steps} step "
                f"evaluations and {revolve.time:g} time units (an evaluation 1, a taped step 2)"
            ),
        )
    if name in DISK_SCHEDULES:
        write = DISK_COST if args.write_cost is None else args.write_cost
        read = DISK_COST if args.read_cost is None else args.read_cost
        if name == "two_level":
            plan = S.TwoLevel(n, s, args.disk_snapshots, write, read)
        else:
            plan = S.DiskRevolve(n, s, write, read)
        return (
            plan,
            None,
            (
                f"its cost in the disk model of remat.schedules.disk, {plan.cost:g} step times "
                f"with a write costing {write:g} and a read {read:g}, is the optimum for these "
                "slots"
            ),
        )
    online = name == "online"
    plan = S.make_schedule(name, steps=None if online else n, snapshots=s)
    if name in ("revolve", "online"):
        return (
            plan,
            None,
            (f"the binomial optimum with {s} slots is {S.optimal_forward_steps(n, s)}"),
        )
    if name == "mixed":
        return plan, None, f"the mixed optimum with {s} slots is {S.mixed_forward_steps(n, s)}"
    return plan, None, None  # store_all, sqrt, periodic: several tapes, outside the models


def schedule(args, out=None):
    out = out or sys.stdout
    refusal = _refusal(args)
    if refusal:
        print(f"remat schedule: error: {refusal}", file=sys.stderr)
        return 2
    online = args.schedule == "online"
    sched, costs, comparison = build(args)
    sim = S.simulate(sched, steps=args.steps if online else None, costs=costs)
    optimum = None
    if args.schedule in ("revolve", "online"):
        optimum = S.optimal_forward_steps(args.steps, args.snapshots)
    elif args.schedule == "mixed":
        optimum = S.mixed_forward_steps(args.steps, args.snapshots)
    shown = args.steps <= args.show
    if args.plot:  # before the output, so that a reader going away cannot stop it
        from ..plot import schedule_diagram

        schedule_diagram(sched, steps=args.steps if online else None).savefig(
            args.plot, dpi=110, bbox_inches="tight"
        )
    if args.format == "table":
        if shown:
            for action in _actions(sched, args.steps, online):
                print(f"  {action!r}", file=out)
        if comparison is None:  # these keep several step tapes at once: outside the models
            comparison = f"it keeps up to {sim.peak_tapes} step tapes at once"
        disk = ""
        if sim.peak_disk_snapshots:
            disk = (
                f", {sim.writes[S.DISK]} disk writes and {sim.reads[S.DISK]} reads, peak "
                f"{sim.peak_disk_snapshots} disk snapshots"
            )
        print(
            f"{sched!r}: {sim.forward_steps} step evaluations ({sim.advances} untaped, "
            f"{sim.taped_steps} taped), {sim.reversed_steps} reversed, peak "
            f"{sim.peak_snapshots} snapshots{disk}; {comparison}",
            file=out,
        )
        if args.plot:
            print(f"diagram written to {args.plot}", file=out)
        return 0
    totals = dict(
        schedule=args.schedule,
        description=repr(sched),
        steps=sim.steps,
        snapshots=args.snapshots,
        forward_steps=sim.forward_steps,
        advances=sim.advances,
        taped_steps=sim.taped_steps,
        reversed_steps=sim.reversed_steps,
        peak_snapshots=sim.peak_snapshots,
        peak_tapes=sim.peak_tapes,
        actions=sim.actions,
        optimum=optimum,
        disk_snapshots=args.disk_snapshots,
        disk_writes=sim.writes[S.DISK],
        disk_reads=sim.reads[S.DISK],
        peak_disk_snapshots=sim.peak_disk_snapshots,
        cost=getattr(sched, "cost", None),  # disk schedules: step times, writes and reads
        predicted_time=sim.time,  # optimal: under its unit costs
        peak_units=sim.peak_bytes,  # optimal: memory under its unit costs
    )
    if args.format == "csv":
        write_csv([totals], out)
        return 0
    listed = [_action_dict(a) for a in _actions(sched, args.steps, online)] if shown else None
    write_json(
        dict(command="schedule", **totals, action_list=listed, figure=args.plot, **environment()),
        out,
    )
    return 0
