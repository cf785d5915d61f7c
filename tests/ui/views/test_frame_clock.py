import panel as pn

from lab.ui.views.frame_clock import FrameClock


def test_each_frame_count_goes_as_a_message_and_a_stale_answer_gets_the_count_again(monkeypatch):
    """The browser learns each frame's count from a message; an answer for an older frame (a view rendered before
    the last message, which started from a stale count) is answered with the current count, so the page never waits
    for an answer that cannot come."""
    clock = FrameClock(pn.pane.Markdown("grid"))
    messages: list[int] = []
    monkeypatch.setattr(clock, "_send_msg", messages.append)
    assert clock.ready and not clock.browser  # no browser yet: snapshots are not held back
    clock.drawn = 0  # a browser shows it, and has drawn all (none) it was sent
    clock.tick()
    clock.tick()  # (a page that is not paced may send two before an answer)
    assert messages == [1, 2] and clock.sent == 2 and not clock.ready
    clock.drawn = 1  # a view that had not had the second count
    assert messages == [1, 2, 2] and not clock.ready
    clock.drawn = 2
    assert messages == [1, 2, 2] and clock.ready
