"""gfd/echo.py: the one way a message shows a value someone else supplied."""

from __future__ import annotations

from gfd.echo import MAX_MESSAGE_CHARS, bounded_message, clip, clip_path, describe, one_line


def test_clip_keeps_a_short_value_and_cuts_a_long_one_saying_its_length() -> None:
    assert clip("gpu") == "gpu"
    shown = clip("x" * 1_000_000)
    assert shown == "x" * 100 + "... (1000000 characters)"


def test_clip_keeps_a_value_on_one_line_and_out_of_the_terminal() -> None:
    shown = clip("a\nb\r\x1b[31mc\u2028d\x00")
    assert shown == "a\\nb\\r\\x1b[31mc\\u2028d\\x00"
    assert shown.isprintable()


def test_clip_shows_an_invisible_character_by_its_code() -> None:
    # a bidirectional override or a zero-width space would make the line read otherwise
    assert clip("a\u202eb\u200bc\U000f0000") == "a\\u202eb\\u200bc\\U000f0000"
    assert clip("Tesla ü 日本") == "Tesla ü 日本"


def test_one_line_flattens_what_a_server_or_a_plugin_sent() -> None:
    shown = one_line("error:\n\n  token\trefused\r\n\x1b[2J\u2028done ")
    assert shown == "error: token refused \\x1b[2J done"
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
