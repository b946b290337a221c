"""What the tests that measure a training step with torch's profiler share.

Under scripts/sanitize.sh (ASan preloaded) torch's profiler aborts the
process when it stops: those tests skip there and run in scripts/test.sh.
"""

from __future__ import annotations

import copy
import os
from typing import Any, Callable

import pytest
from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_min_cut

UNDER_ASAN = os.environ.get("FXCUT_UNDER_ASAN") == "1" or "libasan" in os.environ.get("LD_PRELOAD", "")

#: skips a test that runs torch's profiler under ASan
needs_profiler = pytest.mark.skipif(UNDER_ASAN, reason="torch's profiler aborts under an LD_PRELOADed ASan runtime; "
                                    "this test runs in scripts/test.sh")


def recording_partition(seen: dict[str, Any]) -> Callable[..., Any]:
    """torch's partitioner, recording into ``seen`` the joint graph it got
    (a copy), the names of the values its forward saves, and
    ``num_fwd_outputs``."""

    def recording(joint: Any, inputs: Any, **kwargs: Any) -> Any:
        seen["joint"] = copy.deepcopy(joint)
        fw, bw = torch_min_cut(joint, inputs, **kwargs)
        nfo = kwargs["num_fwd_outputs"]
        output = next(n for n in fw.graph.nodes if n.op == "output")
        seen["saved"] = [n.name for n in output.args[0][nfo:]]
        seen["num_fwd_outputs"] = nfo
        return fw, bw

    return recording
