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


def schedule(args, out=None):
    out = out or sys.stdout
    if args.schedule in ("revolve", "online", "periodic") and args.snapshots is None:
        print(
            f"remat schedule: error: --schedule {args.schedule} needs --snapshots", file=sys.stderr
        )
        return 2
    if args.schedule in ("store_all", "sqrt") and args.snapshots is not None:
        print(
            f"remat schedule: error: --schedule {args.schedule} takes no --snapshots",
            file=sys.stderr,
        )
        return 2
    online = args.schedule == "online"
    sched = S.make_schedule(
        args.schedule, steps=None if online else args.steps, snapshots=args.snapshots
    )
    sim = S.simulate(sched, steps=args.steps if online else None)
    optimum = None
    if args.schedule in ("revolve", "online"):
        optimum = S.optimal_forward_steps(args.steps, args.snapshots)
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
        if optimum is not None:
            comparison = f"the binomial optimum with {args.snapshots} slots is {optimum}"
        else:  # these keep several step tapes at once: outside the binomial model
            comparison = f"it keeps up to {sim.peak_tapes} step tapes at once"
        print(
            f"{sched!r}: {sim.forward_steps} step evaluations ({sim.advances} untaped, "
            f"{sim.taped_steps} taped), {sim.reversed_steps} reversed, peak "
            f"{sim.peak_snapshots} snapshots; {comparison}",
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
