"""How a recorder shows its records: ``print(tape)`` and ``tape.to_dot()``.

:class:`RecorderViews` is the base of :class:`remat.tape.Recorder`: it reads the
records a recorder listed and writes them as text (one line each) or as a
Graphviz DOT graph.  Nothing here runs while ops are applied or reversed.
"""

from __future__ import annotations

from typing import Any


class RecorderViews:
    """The text and graph views of a recorder's ``records`` (its base class)."""

    records: list[Any]

    def saved_bytes(self) -> int:
        raise NotImplementedError

    def _input_name(self, node: Any, number: dict[int, int]) -> str:
        """How a record's input is named (the recorder knows the kinds of node)."""
        raise NotImplementedError

    def __str__(self):
        return self.describe()

    def describe(self, expand_loops: bool = False, max_actions: int = 20) -> str:
        """The records as text, one line each: ``print(tape)`` is ``describe()``.

        Records are numbered 1, 2, 3 ... in the order they were made on this
        tape; each line gives the op, the output shape, the bytes it saves for
        backward ("freed" once backward has passed), and its inputs: the number
        of the record that made each one, ``leaf`` (a tensor made with
        requires_grad=True), ``constant`` (no gradient wanted), ``input`` (an
        input remat made for a loop step or rm.grad) or ``outside`` (a record
        made before this tape was opened).  ``expand_loops=True`` lists under
        each loop, chain or scan record the actions of its schedule (at most
        ``max_actions`` of them), while the record still holds its run.

        >>> import remat as rm
        >>> x = rm.tensor([1.0, 2.0], requires_grad=True)
        >>> with rm.Tape() as tape:
        ...     y = (rm.sin(x) * x).sum()
        >>> print(tape)  # doctest: +NORMALIZE_WHITESPACE
        Tape: 3 records, 48 bytes saved
          #1  sin       2       16 B saved  inputs: leaf 2
          #2  multiply  2       32 B saved  inputs: #1, leaf 2
          #3  sum       scalar  0 B saved   inputs: #2
        """
        number = {id(r): k for k, r in enumerate(self.records, 1)}
        rows: list[tuple[str, ...]] = []
        for k, record in enumerate(self.records, 1):
            saved = "freed" if record.freed else f"{record.saved_bytes()} B saved"
            if record.freed:
                inputs = "inputs freed by backward"
            else:
                inputs = "inputs: " + ", ".join(self._input_name(p, number) for p in record.parents)
            rows.append((f"#{k}", record.op.name, shape_text(record.shape), saved, inputs))
            if expand_loops and record.op.name == "loop":
                rows.extend(("", f"    {line}") for line in _loop_lines(record, max_actions))
        widths = [max((len(row[c]) for row in rows if len(row) > 2), default=0) for c in range(4)]
        lines = [
            f"{type(self).__name__}: {len(self.records)} records, {self.saved_bytes()} bytes saved"
        ]
        for row in rows:
            if len(row) == 2:
                lines.append(f"  {row[1]}")
            else:
                cells = [cell.ljust(w) for cell, w in zip(row[:4], widths)]
                lines.append("  " + "  ".join(cells) + "  " + row[4])
        return "\n".join(lines)

    def to_dot(self, expand_loops: bool = False, max_actions: int = 12) -> str:
        """The recorded graph as Graphviz DOT text (render it with ``dot -Tsvg``, or
        :meth:`draw`).

        A box per record (its number on this tape, op, output shape and bytes
        saved), an ellipse per leaf tensor (and per input remat made, or record
        made outside this tape), and an arrow from each input to the record that
        used it; constants are not drawn.  ``expand_loops=True`` adds a loop's
        schedule actions to its box (see :meth:`describe`).

        >>> import remat as rm
        >>> x = rm.tensor([1.0, 2.0], requires_grad=True)
        >>> with rm.Tape() as tape:
        ...     y = (x * x).sum()
        >>> print(tape.to_dot())  # doctest: +NORMALIZE_WHITESPACE
        digraph tape {
          rankdir=LR;
          node [fontname="Helvetica", fontsize=11];
          n1 [shape=ellipse, label="leaf 2"];
          r1 [shape=box, label="#1 multiply\\n2\\n32 B saved"];
          r2 [shape=box, label="#2 sum\\nscalar\\n0 B saved"];
          n1 -> r1;
          n1 -> r1;
          r1 -> r2;
        }
        <BLANKLINE>
        """
        number = {id(r): k for k, r in enumerate(self.records, 1)}
        # id(node) -> (DOT name, its label) for nodes that are not our records
        sources: dict[int, tuple[str, str]] = {}
        boxes, edges = [], []
        for k, record in enumerate(self.records, 1):
            saved = "freed" if record.freed else f"{record.saved_bytes()} B saved"
            label = [f"#{k} {record.op.name}", shape_text(record.shape), saved]
            if expand_loops and record.op.name == "loop":
                label.extend(_loop_lines(record, max_actions))
            boxes.append(f"  r{k} [shape=box, label={_dot_label(label)}];")
            for parent in record.parents or ():
                if parent is None:
                    continue
                j = number.get(id(parent))
                if j is None:
                    name, text = sources.setdefault(
                        id(parent), (f"n{len(sources) + 1}", self._input_name(parent, number))
                    )
                else:
                    name = f"r{j}"
                edges.append(f"  {name} -> r{k};")
        ellipses = [
            f"  {name} [shape=ellipse, label={_dot_label([text])}];"
            for name, text in sources.values()
        ]
        head = ["digraph tape {", "  rankdir=LR;", '  node [fontname="Helvetica", fontsize=11];']
        return "\n".join(head + ellipses + boxes + edges + ["}"]) + "\n"

    def draw(self, expand_loops: bool = False, max_actions: int = 12) -> Any:
        """:meth:`to_dot` as a ``graphviz.Source`` (shown as a picture in Jupyter; call
        ``.render()`` to write a file).  Needs the optional ``graphviz`` package
        (``pip install "remat[graph]"``) and the Graphviz programs (``apt install graphviz``,
        ``brew install graphviz``, ...)."""
        try:
            import graphviz
        except ImportError:
            raise ImportError(
                "tape.draw() needs the graphviz package (pip install 'remat[graph]', and the "
                "Graphviz programs); tape.to_dot() gives the DOT text without it"
            ) from None
        return graphviz.Source(self.to_dot(expand_loops, max_actions))


def shape_text(shape):
    if not isinstance(shape, tuple):  # a multi-output record (a loop) has a tuple of shapes
        return ""
    if shape and all(isinstance(n, tuple) for n in shape):
        return ", ".join(shape_text(s) for s in shape)
    return "x".join(map(str, shape)) or "scalar"


def _loop_lines(record, max_actions):
    """The schedule and (the first ``max_actions`` of) its actions, for a loop record."""
    run = record.args[0] if record.args else None
    schedule = getattr(run, "schedule", None)
    if schedule is None:
        return ["schedule: released by backward (expand before backward)"]
    steps = run.stats.steps
    actions, shown, total = iter(schedule), [], 0  # a fresh run of the same schedule
    finish = getattr(actions, "finish", None)  # online: told the length after its last step
    for action in actions:
        total += 1
        if len(shown) < max_actions:
            shown.append(repr(action))
        kind = type(action).__name__
        if finish is not None and kind == "Tape" and action.stop == steps:
            finish(steps)
            finish = None
        if kind == "End":
            break
    more = [f"... {total - len(shown)} more"] if total > len(shown) else []
    owner = run.chain.owner
    return [f"{owner}: {schedule!r}, {steps} steps, {total} actions"] + shown + more


def _dot_label(lines):
    """A DOT label: the first line centred, the rest (a loop's actions) left-aligned."""
    escaped = [line.replace("\\", "\\\\").replace('"', '\\"') for line in lines]
    if len(escaped) <= 3:
        return '"' + "\\n".join(escaped) + '"'
    return '"' + "\\n".join(escaped[:3]) + "\\n" + "\\l".join(escaped[3:]) + '\\l"'
