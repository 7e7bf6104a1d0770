"""``python -m tests.e2e.launch ARGS``: gfd's own entry point, unchanged, except that with
GFD_E2E_VERIFY_INTERVAL (seconds) set, the API outputs re-read what they published at that
interval instead of watching it -- what they do where the watch is refused (SPEC §6.4), every
10 minutes by default -- so an e2e test can see that fallback notice, within seconds, a node
that was deleted and re-created under it."""

from __future__ import annotations

import os

from gfd.outputs.nodefeature import NodeFeatureOutput
from gfd.outputs.nodelabels import NodeLabelsOutput

_interval = os.environ.get("GFD_E2E_VERIFY_INTERVAL")
if _interval:

    def _no_watch(self: object, wake: object) -> None:
        """The periodic re-read instead, as where the watch is refused."""

    NodeLabelsOutput.verify_interval = float(_interval)
    NodeFeatureOutput.verify_interval = float(_interval)
    NodeLabelsOutput.watch = _no_watch  # type: ignore[method-assign,assignment]
    NodeFeatureOutput.watch = _no_watch  # type: ignore[method-assign,assignment]

from gfd.cli import main  # noqa: E402

main()
