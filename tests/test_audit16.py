"""Holes found while auditing issue 16 against the code, each pinned by a test."""

import numpy as np

import remat as rm


def test_a_byte_budget_takes_a_loop_whose_step_saves_nothing():
    # h * 0.5 saves no array for its backward (the factor is a Python number), so the
    # measured tape of a step is 0 bytes; measuring divided the budget by it
    x = rm.tensor(np.linspace(0.0, 1.0, 64), requires_grad=True)
    with rm.Tape(memory="1 MiB") as tape:
        h = tape.loop(lambda h: h * 0.5, x, steps=10)
    h.sum().backward()
    assert tape.stats.steps == 10 and tape.stats.peak_bytes <= 2**20
    np.testing.assert_array_equal(x.grad, np.full(64, 0.5**10))


def test_every_cli_option_says_its_default_or_that_it_is_required():
    import argparse

    from remat.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in commands.choices.items():
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            text = command._get_formatter()._expand_help(action) if action.help else ""
            assert "default" in text or "required" in text, (name, action.option_strings, text)
