"""Spark's planning of each batch, fenced: a driver woken between two batches records nothing.

Spark plans a batch before it hands it to the sink: it asks the source for
the batch's end (``latestOffset``) and records it in the checkpoint's offset
log. The sink's fence stops a driver that paused and was taken over at the
end of each batch, before Spark records the batch in the commit log
(:meth:`app.sink.commit.ExactlyOnceSink.hand_back`); one that paused after
that check woke with Spark planning the next batch, and recorded it in the
offset log before anything checked: a new driver on the same checkpoint
about to plan that batch then failed on the entry. The job's source
(:class:`FencedSource`) checks the fence before it hands Spark each
trigger's end, so such a driver stops there (exit 7), recording nothing.

The source's reader runs in Spark's planner process, a Python process of the
driver's JVM, not the driver's own: the claim reaches it in the source's
options (:func:`fence_options`), and it follows the writer's ledger entries
(:class:`~app.sink.fencing.FollowingFence`). Left to chance: a pause of more
than a lease between that check and Spark's write of the offset log entry, a
few milliseconds (docs/design.md, "One writer").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from app.sink.fencing import Fence, FollowingFence
from app.sink.ledger import Ledger, WriterInfo
from app.sources import stream
from app.storage import resolve

if TYPE_CHECKING:
    from app.sink.crash_points import PlanningStop

OUTPUT_OPTION = "fenceOutput"
CLAIM_OPTION = "fenceClaim"
WRITER_OPTION = "fenceWriter"
STOP_OPTION = "planningStop"  # a test seam's (app.sink.crash_points.PlanningStop)

# The stop the next query's source makes: only tests install one (the command line, from
# the environment: app.sink.crash_points).
_stop: PlanningStop | None = None


def install_stop(stop: PlanningStop | None) -> None:
    """The planning stop of every query started from now on (None: none)."""
    global _stop  # noqa: PLW0603 (a test seam: one per process)
    _stop = stop


def fence_options(fence: Fence) -> dict[str, str]:
    """The options that carry ``fence``'s claim to the source (and an installed stop)."""
    options = {
        OUTPUT_OPTION: fence.location.uri,
        CLAIM_OPTION: str(fence.claim),
        WRITER_OPTION: orjson.dumps(fence.info.to_json()).decode(),
    }
    if _stop is not None:
        options[STOP_OPTION] = str(_stop.trigger)
    return options


@dataclass
class PlanningCheck:
    """What the source's reader calls before it hands Spark a trigger's end."""

    fence: Fence
    stop: PlanningStop | None = None
    triggers: int = 0  # the triggers planned so far

    def __call__(self) -> None:
        self.triggers += 1
        if self.stop is not None:
            self.stop(self.triggers)
        self.fence.check("Spark records its next batch in the checkpoint")


class FencedSource(stream.TablecastSource):
    """The job's source: :class:`~app.sources.stream.TablecastSource`, fenced by the claim
    in its options (:func:`fence_options`)."""

    def before_planning(self) -> Callable[[], None] | None:
        options = self.options
        if CLAIM_OPTION not in options:
            return None
        info = WriterInfo.from_json(orjson.loads(options[WRITER_OPTION]))
        fence = FollowingFence(
            Ledger(resolve(options[OUTPUT_OPTION])), int(options[CLAIM_OPTION]), info
        )
        if STOP_OPTION not in options:
            return PlanningCheck(fence)
        from app.sink.crash_points import PlanningStop  # only a test's run names a stop

        return PlanningCheck(fence, PlanningStop(int(options[STOP_OPTION])))
