"""One call per vLLM server, all at once (load_on_vllm, load_adapter_on_vllm):
every server's result or error is kept, and the first error in the
caller's order is raised with all of them attached."""

from __future__ import annotations

import threading
from typing import Callable, Dict, Sequence, TypeVar

from . import errors

T = TypeVar("T")


def fan_out(urls: Sequence[str], one: Callable[[str], T]) -> Dict[str, T]:
    """Runs one(url) for every url on its own thread and returns {url:
    its result}. When some raise, the first in `urls` order is raised (a
    WtError as it is; anything else as Unavailable naming the url, since an
    answer that could not be read is never lost), with " (and N more
    server(s))" when several failed, and `.results` (the servers that
    succeeded) and `.failures` ({url: WtError}) on it: the others may have
    done their part."""
    results: Dict[str, T] = {}
    failures: Dict[str, errors.WtError] = {}

    def guarded(url: str) -> None:
        try:
            results[url] = one(url)
        except errors.WtError as e:
            failures[url] = e
        except Exception as e:  # noqa: BLE001  (reported below)
            failures[url] = errors.Unavailable(f"{url}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=guarded, args=(u,)) for u in urls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        first = next(u for u in urls if u in failures)
        err = failures[first]
        if len(failures) > 1:
            err = type(err)(str(err) + f" (and {len(failures) - 1} more server(s))")
        err.results = results  # type: ignore[attr-defined]
        err.failures = failures  # type: ignore[attr-defined]
        raise err
    return results
