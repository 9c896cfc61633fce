"""How a command's text reaches people: tables drawn by rich on a terminal, the
same facts as plain aligned columns when piped, and a wait's progress line."""

from __future__ import annotations

import io

from firn.commands.output import Output, WaitingLine, grid, show


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


OUTPUT = Output(
    {},
    [
        "2 tables",
        grid(("TABLE", "FILES"), [("orders", 12), ("events", None)]),
        "  orders: major due",
    ],
)


def test_piped_output_is_the_plain_text_one_row_per_line() -> None:
    piped = io.StringIO()
    show(OUTPUT, piped)
    assert piped.getvalue() == OUTPUT.plain() + "\n"
    assert piped.getvalue().splitlines() == [
        "2 tables",
        "TABLE   FILES",
        "orders  12",
        "events  -",
        "  orders: major due",
    ]
    assert Output({}, "just text").plain() == "just text"


def test_a_terminal_gets_a_rich_table_with_the_same_cells() -> None:
    terminal = Terminal()
    show(OUTPUT, terminal)
    lines = [line.rstrip() for line in terminal.getvalue().splitlines()]
    assert lines != OUTPUT.plain().splitlines()  # drawn, not the plain layout
    assert "\x1b[1m" in terminal.getvalue()  # bold headers
    rows = [line.split() for line in lines]
    assert rows[0] == ["2", "tables"]
    assert ["orders", "12"] in rows
    assert ["events", "-"] in rows
    assert any(set(line.strip()) == {"─"} for line in lines)  # the rule under the headers
    assert lines[-1] == "  orders: major due"


def test_the_waiting_line_prints_each_change_once_when_not_on_a_terminal() -> None:
    stream = io.StringIO()
    with WaitingLine(stream) as waiting:
        for line in ("plan 1 Planned", "plan 1 Planned", "plan 1 Executing"):
            waiting.update(line)
    assert stream.getvalue().splitlines() == [
        "firn: waiting: plan 1 Planned",
        "firn: waiting: plan 1 Executing",
    ]


def test_the_waiting_line_is_a_live_status_on_a_terminal() -> None:
    terminal = Terminal()
    with WaitingLine(terminal) as waiting:
        waiting.update("plan 1 Executing")
    shown = terminal.getvalue()
    assert "waiting: plan 1 Executing" in shown
    assert "firn: waiting:" not in shown
    assert shown.endswith("\x1b[1A\x1b[2K")  # erased when the wait ends
