"""gfd/echo.py: the one way a message shows a value someone else supplied."""

from __future__ import annotations

from gfd.echo import MAX_MESSAGE_CHARS, bounded_message, clip, clip_path, describe


def test_clip_keeps_a_short_value_and_cuts_a_long_one_saying_its_length() -> None:
    assert clip("gpu") == "gpu"
    shown = clip("x" * 1_000_000)
    assert shown == "x" * 100 + "... (1000000 characters)"


def test_clip_keeps_a_value_on_one_line_and_out_of_the_terminal() -> None:
    shown = clip("a\nb\r\x1b[31mc\u2028d\x00")
    assert shown == "a\\nb\\r\\x1b[31mc\\u2028d\\x00"
    assert shown.isprintable()


def test_clip_path_keeps_the_end_that_names_the_file() -> None:
    path = "/very" * 1000 + "/config.yaml"
    shown = clip_path(path)
    assert shown.startswith("...") and "/config.yaml (" in shown
    assert len(shown) < 250
    assert clip_path("/etc/gfd/config.yaml") == "/etc/gfd/config.yaml"


def test_describe_is_short_for_any_value() -> None:
    for value in ["v" * 10**6, ["v" * 10**6] * 10, {"k" * 10**6: 1}, 10**4000, "\x1b[2J"]:
        shown = describe(value)
        assert len(shown) < 200 and shown.isprintable(), shown[:300]


def test_bounded_message_holds_any_message_to_one_short_line() -> None:
    shown = bounded_message("line\n" * 10**6)
    assert "\n" not in shown and len(shown) < MAX_MESSAGE_CHARS + 50
