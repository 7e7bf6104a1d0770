"""``python -m tests.e2e.launch ARGS``: gfd's own entry point, unchanged, except that the
verification interval of the API outputs (SPEC §6.4: a read at most every 10 minutes at steady
state) is taken from GFD_E2E_VERIFY_INTERVAL (seconds) when set, so an e2e test can watch the
agent notice, within seconds, a node that was deleted and re-created under it."""

from __future__ import annotations

import os

from gfd.outputs.nodefeature import NodeFeatureOutput
from gfd.outputs.nodelabels import NodeLabelsOutput

_interval = os.environ.get("GFD_E2E_VERIFY_INTERVAL")
if _interval:
    NodeLabelsOutput.verify_interval = float(_interval)
    NodeFeatureOutput.verify_interval = float(_interval)

from gfd.cli import main  # noqa: E402

main()
