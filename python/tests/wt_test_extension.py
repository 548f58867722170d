"""A test-only vLLM worker extension: wt's, plus a way to make the next
loads fail midway (`wt_fail_loads(n, after)`: the next n reloads raise
after `after` tensors), to drive the restore and the fence with a real
vLLM. vLLM imports it from python/tests (on PYTHONPATH in the tests)."""

from __future__ import annotations

from wt_transfer.vllm import WtWorkerExtension


class FailingWtExtension(WtWorkerExtension):
    def wt_fail_loads(self, n: str = "1", after: str = "5") -> int:
        self._wt_failures = [int(n), int(after)]
        return int(n)

    def _wt_reload(self, model):
        reload = super()._wt_reload(model)

        def run(pairs):
            left, after = getattr(self, "_wt_failures", [0, 0])
            if pairs is None or left <= 0:
                return reload(pairs)
            self._wt_failures = [left - 1, after]

            def failing():
                for i, pair in enumerate(pairs):
                    if i == after:
                        raise RuntimeError(f"test: load made to fail after {after} tensors")
                    yield pair
            return reload(failing())
        return run
