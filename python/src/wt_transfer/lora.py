"""LoRA adapters as wt rounds: vLLM loads a committed adapter version from a
wt-server's export, from memory, under the adapter's name.

A wt-server holds an adapter's tensors with PEFT's names
(`base_model.model.<module>.lora_A.weight` [r, in] and `...lora_B.weight`
[out, r]); each committed version is readable through its export (a Unix
socket, `wt_transfer.consumer`). vLLM loads it through its own route,
unchanged:

    POST /v1/load_lora_adapter
    {"lora_name": NAME, "lora_path": lora_path(export, NAME, version,
                                               sequence, alpha),
     "load_inplace": true}

(vLLM started with `--enable-lora` and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True;
`load_adapter_on_vllm` posts it to every server.) vLLM's frontend keeps the
adapter's int id, waits for the engine to load it between two steps, then
points the name at the new request: every request admitted after the load
gets the new version, and a refusal leaves the previous version serving.
A request in flight across the load goes on with the new version from the
next step (what it computed before stays), as with any in-place LoRA load
in vLLM.

The lora_path is a wt path, not a directory:

    wt:<export socket path>?adapter=<name>&version=<version>&sequence=<n>
       &alpha=<float>&worker=<n>

(percent-encoded; `lora_path` writes it, `parse_lora_path` reads it). It
differs for every version, so vLLM's prefix cache, which keys a LoRA
request's blocks by (lora_name, lora_path), never reuses a block computed
with another version.

In each vLLM process the package's `vllm.general_plugins` entry point
(`wt_transfer.vllm.register`) calls `install_vllm_loader`, which teaches
vLLM's worker-side LoRA manager to read such paths (every other path goes
to vLLM's code unchanged):

- **Load** (`WorkerLoRAManager._load_adapter`): acquire the version from
  the export, copy every tensor and release the lease at once (the export
  keeps nothing held back; the copy is vLLM's, as a file's tensors would
  be), then the checks and the construction vLLM's loader makes for a
  checkpoint directory: PEFTHelper.validate_legal (rank against
  --max-lora-rank, ...), the target modules against the model's, and
  LoRAModel.from_lora_tensors with vLLM's own arguments. Before any of it
  reaches vLLM's manager (which, with load_inplace, removes the served
  version first), every lora_A's inputs and lora_B's outputs are checked
  against the LoRA layer the module maps to (`_check_tensor_shapes`):
  vLLM itself never checks them, and would fail only at activation or in
  the forward, the previous version already gone.
- **Which version an id serves** (`LRUCacheWorkerLoRAManager.add_adapter`):
  with load_inplace, vLLM reloads on every call, and every inference
  request carries the LoRARequest it was admitted with, load_inplace
  included, so it would reload at every step, and a request admitted
  before a switch would bring the previous version back. For a wt path only
  an explicit load (`add_lora`: the load route, a resolver, a static
  --lora-modules entry) loads; a step only activates what is loaded. If the
  id was evicted from vLLM's CPU cache (--max-cpu-loras) or dropped (a
  base-weights reload resets LoRA state), a step loads the version last
  loaded explicitly again, never the older one an in-flight request names.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import (Any, Callable, Dict, List, NamedTuple, Optional, Sequence,
                    Set, Tuple, TypedDict, Union)

from . import errors
from ._fanout import fan_out

SCHEME = "wt:"
ROUTE = "/v1/load_lora_adapter"
_FIELDS = ("adapter", "version", "sequence", "alpha", "worker")


class AdapterSource(NamedTuple):
    """Where a LoRA adapter version is: what a wt lora_path says.

    export: the wt-server export's socket path, on the vLLM host.
    adapter: the adapter's name at the wt-server (as a rule vLLM's
        lora_name too; errors name both where they differ).
    version, sequence: the committed version's name and its commit
        sequence at that export (the lease must report the same).
    alpha: PEFT's lora_alpha (scaling = alpha / r).
    worker: whose copy at the export (one per GPU worker there)."""

    export: str
    adapter: str
    version: str
    sequence: int
    alpha: float
    worker: int = 0


def lora_path(export: str, name: str, version: str, sequence: int,
              alpha: float, worker: int = 0) -> str:
    """The lora_path vLLM's load route takes for version `version`
    (commit `sequence`) of adapter `name` at the wt export `export`, with
    PEFT's `alpha`. InvalidArgument names the argument at fault."""
    src = AdapterSource(str(export), str(name), str(version), sequence, alpha,
                        worker)
    _check_source(src, "lora_path")
    query = urllib.parse.urlencode(
        [("adapter", src.adapter), ("version", src.version),
         ("sequence", str(int(src.sequence))), ("alpha", repr(float(src.alpha))),
         ("worker", str(int(src.worker)))], quote_via=urllib.parse.quote)
    return f"{SCHEME}{urllib.parse.quote(src.export, safe='/')}?{query}"


def is_wt_lora_path(path: Any) -> bool:
    """Whether `path` is a wt lora_path (one this module loads)."""
    return isinstance(path, str) and path.startswith(SCHEME)


def parse_lora_path(path: str) -> AdapterSource:
    """The AdapterSource a wt lora_path names; InvalidArgument naming the
    path and the field otherwise."""
    if not is_wt_lora_path(path):
        raise errors.InvalidArgument(
            f"lora path '{path}': not a wt path (it starts with '{SCHEME}')")
    export, sep, query = path[len(SCHEME):].partition("?")
    if not sep:
        raise errors.InvalidArgument(
            f"lora path '{path}': no '?' before its fields {', '.join(_FIELDS)}")
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True,
                                       strict_parsing=True)
    except ValueError as e:
        raise errors.InvalidArgument(f"lora path '{path}': {e}") from None
    fields: Dict[str, str] = {}
    for k, v in pairs:
        if k not in _FIELDS:
            raise errors.InvalidArgument(
                f"lora path '{path}': unknown field '{k}' (fields: "
                f"{', '.join(_FIELDS)})")
        if k in fields:
            raise errors.InvalidArgument(f"lora path '{path}': field '{k}' twice")
        fields[k] = v
    for k in ("adapter", "version", "sequence", "alpha"):
        if k not in fields:
            raise errors.InvalidArgument(f"lora path '{path}': no field '{k}'")
    numbers: Dict[str, Any] = {}
    for k, conv in (("sequence", int), ("alpha", float), ("worker", int)):
        if k in fields:
            try:
                numbers[k] = conv(fields[k])
            except ValueError:
                raise errors.InvalidArgument(
                    f"lora path '{path}': field '{k}' is '{fields[k]}', "
                    f"not {'an integer' if conv is int else 'a number'}") from None
    src = AdapterSource(urllib.parse.unquote(export), fields["adapter"],
                        fields["version"], numbers["sequence"], numbers["alpha"],
                        numbers.get("worker", 0))
    _check_source(src, f"lora path '{path}'")
    return src


def _check_source(src: AdapterSource, where: str) -> None:
    if not src.export:
        raise errors.InvalidArgument(f"{where}: export: the export's socket path")
    if not src.adapter:
        raise errors.InvalidArgument(f"{where}: adapter: a non-empty name")
    if not src.version:
        raise errors.InvalidArgument(f"{where}: version: a non-empty name")
    if isinstance(src.sequence, bool) or not isinstance(src.sequence, int) \
            or src.sequence < 1:
        raise errors.InvalidArgument(
            f"{where}: sequence: a commit sequence (an integer >= 1), "
            f"not {src.sequence!r}")
    if isinstance(src.alpha, bool) or not isinstance(src.alpha, (int, float)) \
            or not math.isfinite(src.alpha):
        raise errors.InvalidArgument(
            f"{where}: alpha: PEFT's lora_alpha (a finite number), not {src.alpha!r}")
    if isinstance(src.worker, bool) or not isinstance(src.worker, int) \
            or src.worker < 0:
        raise errors.InvalidArgument(
            f"{where}: worker: an integer >= 0, not {src.worker!r}")


# --- the trainer's side ----------------------------------------------------------


def _post_text(url: str, body: Dict[str, Any], timeout: float) -> str:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"},
                                 method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        text: str = r.read().decode("utf-8", "replace")
        return text


def _refusal(url: str, name: str, path: str, e: Exception) -> errors.WtError:
    """The WtError for a load route's failure: wt's class where the worker
    tagged one, NotFound for vLLM's adapter-not-found, FailedPrecondition
    for vLLM's other refusals (rank, target modules, ...), Unavailable for
    a server that did not answer; the message names the server, the
    adapter and the path, then vLLM's words."""
    where = f"{url} {ROUTE}: adapter '{name}' ({path}): "
    if isinstance(e, urllib.error.HTTPError):
        text = e.read().decode("utf-8", "replace")
        kind = ""
        try:
            d = json.loads(text)
            err = d.get("error", d.get("detail", text)) if isinstance(d, dict) else d
            if isinstance(err, dict):
                kind = str(err.get("type", ""))
                err = err.get("message", json.dumps(err))
            text = str(err)
        except ValueError:
            pass
        if e.code == 404 and text == "Not Found":
            return errors.FailedPrecondition(
                where + "vLLM has no such route: start it with --enable-lora "
                "and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True")
        # vLLM writes "<path>" for any file path in an error it returns;
        # the export's is the caller's own
        src = parse_lora_path(path)
        text = text.replace(f"{SCHEME}<path>?", path.partition("?")[0] + "?")
        text = text.replace("export <path>", f"export {src.export}")
        default = errors.NotFound if kind == "NotFoundError" else \
            errors.FailedPrecondition
        return errors.from_text(text[:2000], default, where + f"HTTP {e.code}: ")
    if isinstance(e, TimeoutError) or "timed out" in str(e):
        return errors.DeadlineExceeded(where + f"no answer in time: {e}")
    return errors.Unavailable(where + str(e))


class AdapterLoad(TypedDict):
    """One server's load_adapter_on_vllm result (`message`: vLLM's answer)."""

    adapter: str
    lora_path: str
    seconds: float
    message: str


def load_adapter_on_vllm(urls: Union[str, Sequence[str]], name: str,
                         lora_path: str, *, timeout: float = 60.0
                         ) -> Dict[str, AdapterLoad]:
    """Asks every vLLM server in `urls`, in parallel, to load the adapter
    version `lora_path` names (see `lora_path`) under `name`, in place of
    the one it serves under that name: POST /v1/load_lora_adapter
    {"lora_name", "lora_path", "load_inplace": true}. Each server's route
    returns once its engine has the version loaded and requests for `name`
    get it.

    Returns {url: {"adapter", "lora_path", "seconds", "message"}}. A server
    that refuses or fails raises (the first, in `urls` order) a WtError
    naming the server, the adapter, the path and vLLM's words, e.g.
    "LoRA rank 32 is greater than max_lora_rank 16."; that server keeps
    serving the previous version. `.results` and `.failures` on it say how
    every server ended (the others may have switched)."""
    if isinstance(urls, str):
        urls = [urls]
    urls = list(urls)
    if not urls:
        raise errors.InvalidArgument("urls: at least one vLLM server")
    if not isinstance(name, str) or not name:
        raise errors.InvalidArgument("name: the adapter's name (vLLM's lora_name)")
    parse_lora_path(lora_path)  # a malformed path fails here, not in vLLM
    body = {"lora_name": name, "lora_path": lora_path, "load_inplace": True}

    def one(url: str) -> AdapterLoad:
        t0 = time.perf_counter()
        try:
            text = _post_text(url.rstrip("/") + ROUTE, body, timeout)
        except (urllib.error.URLError, OSError) as e:
            raise _refusal(url, name, lora_path, e) from None
        except Exception as e:  # noqa: BLE001  (a bad answer: never lost)
            raise errors.Unavailable(
                f"{url} {ROUTE}: adapter '{name}': {type(e).__name__}: {e}") from None
        return {"adapter": name, "lora_path": lora_path,
                "seconds": time.perf_counter() - t0, "message": text}

    return fan_out(urls, one)


# --- the trainer's side ------------------------------------------------------------

def adapter_init_info(name: str, alpha: float,
                      init_info: Dict[str, Any] | None = None) -> Dict[str, Any]:
    """The init info of an adapter set's rounds (docs/lora.md): `init_info`
    (wt's WeightTransferInitInfo as a dict; None: the defaults) with the
    set's spec, `{"adapter": {"name": name, "alpha": alpha}}`. The engine's
    source gives the tensors; the client takes the rank and the target
    modules from them. The first init of a name makes the set on every
    server; a later one must bring the same tensors, rank and alpha."""
    if not isinstance(name, str) or not name:
        raise errors.InvalidArgument("name: the adapter set's name")
    if not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
        raise errors.InvalidArgument(f"alpha: {alpha!r}; PEFT's lora_alpha, positive")
    out = dict(init_info or {})
    out["adapter"] = {"name": name, "alpha": float(alpha)}
    return out


def lora_tensors(model: Any, adapter_name: str = "default") -> Dict[str, Any]:
    """A PEFT model's adapter tensors in PEFT's naming (what
    `adapter_model.safetensors` holds): `peft.get_peft_model_state_dict`,
    whose values share the trained parameters' memory, so the dict can
    stay an engine's source across steps."""
    from peft import get_peft_model_state_dict
    return dict(get_peft_model_state_dict(model, adapter_name=adapter_name))


def adapter_lora_path(client: Any, version: str | None = None, *,
                      server: int = 0, name: str | None = None) -> str:
    """The lora_path of adapter set `name` (default: the client's,
    `client.adapter`) as server `server` of `client` holds it: its export,
    its current version (which `version`, when given, must be), sequence
    and alpha, from GetServerInfo. FailedPrecondition when the server has
    no export or holds another version; NotFound when it has no such set."""
    name = name or getattr(client, "adapter", "")
    if not name:
        raise errors.InvalidArgument("name: the client names no adapter set "
                                     "(wt.Client(adapter=...) or an adapter init)")
    target = client.servers[server]
    sets = {a["name"]: a for a in client.server_info(server).get("adapters", [])}
    a = sets.get(name)
    if a is None:
        raise errors.NotFound(f"{target}: adapter '{name}': the server holds no "
                              f"such set (it holds {sorted(sets)})")
    if not a.get("export_path"):
        raise errors.FailedPrecondition(
            f"{target}: adapter '{name}': the server has no export (wt-server "
            "--export PATH): vLLM reads adapter versions from it")
    held = a.get("weight_version", "")
    if not held or (version is not None and version != held):
        raise errors.FailedPrecondition(
            f"{target}: adapter '{name}': version {version!r} is not the one "
            f"the server holds ({held!r}, sequence {a.get('sequence', 0)})")
    return lora_path(a["export_path"], name, held, int(a["sequence"]),
                     float(a["alpha"]))


def load_adapter(urls: Union[str, Sequence[str]], client: Any,
                 version: str | None = None, *, lora_name: str | None = None,
                 timeout: float = 60.0) -> Dict[str, AdapterLoad]:
    """Loads the adapter version a round of `client` committed into every
    vLLM server of `urls`, under `lora_name` (default: the set's name):
    vLLM server k reads the export of wt-server k when there are as many of
    each (one wt-server beside each vLLM host), else of wt-server 0 (the
    same export path on every host). See `load_adapter_on_vllm` for what
    returns and what raises."""
    if isinstance(urls, str):
        urls = [urls]
    urls = list(urls)
    pairwise = len(urls) == len(client.servers)
    paths: Dict[str, List[str]] = {}
    for k, url in enumerate(urls):
        path = adapter_lora_path(client, version, server=k if pairwise else 0)
        paths.setdefault(path, []).append(url)
    name = lora_name or client.adapter
    out: Dict[str, AdapterLoad] = {}
    for path, group in paths.items():
        out.update(load_adapter_on_vllm(group, name, path, timeout=timeout))
    return out


# --- vLLM's side (its worker processes) --------------------------------------------

_install_lock = threading.Lock()


def install_vllm_loader() -> bool:
    """Teaches vLLM's worker-side LoRA manager to load wt lora_paths (see
    the module's docstring); other paths keep vLLM's code. Idempotent;
    False (nothing done) where vLLM's LoRA support is not importable."""
    try:
        from vllm.lora import worker_manager as wm
    except ImportError:
        return False
    with _install_lock:
        if getattr(wm.WorkerLoRAManager._load_adapter, "_wt_patched", False):
            return True
        originals = {
            "_load_adapter": wm.WorkerLoRAManager._load_adapter,
            "add_adapter": wm.LRUCacheWorkerLoRAManager.add_adapter,
            "_apply_adapters": wm.LRUCacheWorkerLoRAManager._apply_adapters,
        }

        def _load_adapter(self: Any, lora_request: Any) -> Any:
            if not is_wt_lora_path(getattr(lora_request, "lora_path", None)):
                return originals["_load_adapter"](self, lora_request)
            return _load_wt_adapter(self, lora_request)

        def add_adapter(self: Any, lora_request: Any) -> bool:
            return _add_adapter(self, lora_request, originals["add_adapter"])

        def _apply_adapters(self: Any, lora_requests: Any) -> Any:
            # what a step asks for: add_adapter tells it from an explicit load
            self._wt_in_step = True
            try:
                return originals["_apply_adapters"](self, lora_requests)
            finally:
                self._wt_in_step = False

        patches: Tuple[Tuple[Any, Any], ...] = (
            (_load_adapter, originals["_load_adapter"]),
            (add_adapter, originals["add_adapter"]),
            (_apply_adapters, originals["_apply_adapters"]))
        for fn, orig in patches:
            fn.__doc__ = (orig.__doc__ or "") + \
                "\n\n(wt_transfer.lora: wt lora_paths load from a wt export.)"
            fn.__wrapped__ = orig
            fn._wt_patched = True
        wm.WorkerLoRAManager._load_adapter = _load_adapter
        wm.LRUCacheWorkerLoRAManager.add_adapter = add_adapter
        wm.LRUCacheWorkerLoRAManager._apply_adapters = _apply_adapters
        return True


def _served(manager: Any) -> Dict[int, Any]:
    """{lora int id: the LoRARequest last loaded explicitly for it} of a
    worker's manager (wt paths only)."""
    d: Optional[Dict[int, Any]] = manager.__dict__.get("_wt_served")
    if d is None:
        d = manager.__dict__["_wt_served"] = {}
    return d


def _add_adapter(manager: Any, lora_request: Any,
                 original: Callable[[Any, Any], bool]) -> bool:
    """vLLM's LRUCacheWorkerLoRAManager.add_adapter, except that for a wt
    path only an explicit load loads (see the module's docstring)."""
    import msgspec
    served = _served(manager)
    lid = lora_request.lora_int_id
    in_step = getattr(manager, "_wt_in_step", False)
    if not is_wt_lora_path(lora_request.lora_path):
        if not in_step:
            served.pop(lid, None)
        return original(manager, lora_request)
    if not in_step:
        # an explicit load: vLLM's code, unchanged (a refusal raises and
        # leaves the previous version registered and serving)
        loads = lora_request.load_inplace or lid not in manager.list_adapters()
        added = original(manager, lora_request)
        if loads:
            served[lid] = lora_request
        return added
    # a step: activate what is loaded (vLLM's branch for a loaded adapter);
    # an id evicted since gets the version last loaded explicitly again
    current = served.get(lid, lora_request)
    return original(manager, msgspec.structs.replace(
        current, load_inplace=False))


def _connection_lost(e: errors.WtError) -> bool:
    """Whether a consumer's call failed because its connection is gone
    (libwt_consumer's words): a new connection may succeed."""
    return "closed the connection" in e.message or \
        "connection failed earlier" in e.message


def _copy_version(src: AdapterSource, name: str) -> Dict[str, Any]:
    """Every tensor of the version `src` names, copied into new torch
    tensors (vLLM's LoRAModel aliases float32 CPU inputs and scales lora_B
    in place: it must own them), the lease released at once. Errors are
    tagged WtErrors naming the adapter, the version and the export."""
    from ._vllm_load import as_torch, consumer_for
    # libwt_consumer's messages start "export <socket path>: "
    where = f"adapter '{name}'" + \
        (f" (wt adapter '{src.adapter}')" if src.adapter != name else "") + \
        f": version '{src.version}' (sequence {src.sequence})"
    try:
        c = consumer_for(src.export, register_host=False)
        try:
            lease = c.acquire(src.version, worker=src.worker)
        except errors.WtError as e:
            if not _connection_lost(e):
                raise
            # the server this cached connection went to is gone (restarted?)
            c.close()
            c = consumer_for(src.export, register_host=False)
            lease = c.acquire(src.version, worker=src.worker)
        with lease as tensors:
            if tensors.sequence != src.sequence:
                raise errors.FailedPrecondition(
                    f"export {src.export}: it holds version '{tensors.version}' "
                    f"as sequence {tensors.sequence}, not {src.sequence}: the "
                    "lora_path names another commit of that name")
            out = {n: as_torch(a, tensors.dtypes[n]).clone()
                   for n, a in tensors.items()}
    except errors.WtError as e:
        err = type(e)(f"{where}: {e.message}")
        raise errors.tagged(err) from e
    if not out:
        raise errors.tagged(errors.FailedPrecondition(
            f"{where}: export {src.export}: the version holds no tensors"))
    return out


def _peft_config(name: str, tensors: Dict[str, Any], alpha: float) -> Dict[str, Any]:
    """PEFT's adapter_config fields for `tensors`: r from lora_A's rows
    (the most common rank; modules of another rank in rank_pattern),
    target_modules from the names. ValueError names the tensor at fault."""
    from vllm.lora.utils import is_base_embedding_weights, parse_fine_tuned_lora_name
    ranks: Dict[str, List[int]] = {}  # module (PEFT's name) -> [A rows, B cols]
    for tname, t in tensors.items():
        if is_base_embedding_weights(tname):
            continue  # vLLM's loader skips them too
        try:
            module, is_a = parse_fine_tuned_lora_name(tname)
        except ValueError as e:
            raise ValueError(f"LoRA adapter '{name}': tensor '{tname}': {e}") from None
        if t.dim() != 2:
            raise ValueError(f"LoRA adapter '{name}': tensor '{tname}' has shape "
                             f"{list(t.shape)}, not 2 dimensions")
        slot = ranks.setdefault(module, [0, 0])
        slot[0 if is_a else 1] = t.shape[0] if is_a else t.shape[1]
    counts: Dict[int, int] = {}
    for module, (ra, rb) in ranks.items():
        if not ra or not rb:
            raise ValueError(f"LoRA adapter '{name}': module '{module}' has no "
                             f"lora_{'A' if not ra else 'B'}.weight")
        if ra != rb:
            raise ValueError(f"LoRA adapter '{name}': module '{module}': lora_A "
                             f"has rank {ra}, lora_B rank {rb}")
        counts[ra] = counts.get(ra, 0) + 1
    r = max(counts, key=lambda k: counts[k])
    return {"r": r, "lora_alpha": alpha,
            "target_modules": sorted({m.rsplit(".", 1)[-1] for m in ranks}),
            "rank_pattern": {re.escape(m): ra for m, (ra, _) in ranks.items()
                             if ra != r}}


def _expected_lora_modules(manager: Any) -> Set[str]:
    """The module names an adapter may target, as vLLM's
    WorkerLoRAManager._load_adapter computes them."""
    supported = manager._adapter_manager.supported_lora_modules
    packed = manager._adapter_manager.packed_modules_mapping
    expected: List[str] = []
    for module in supported:
        if module in packed:
            expected.extend(packed[module])
        else:
            expected.append(module)
        if module == "experts":
            expected.append(module)
    return set(expected)


def _check_target_modules(path: str, tensors: Dict[str, Any], expected: Set[str],
                          peft_helper: Any, weights_mapper: Any,
                          skip_prefixes: Any) -> None:
    """vLLM's LoRAModel.from_local_checkpoint check of a checkpoint's
    modules against the model's, in its words (`path` for its directory)."""
    from vllm.lora.lora_model import LoRAModel
    from vllm.lora.utils import is_base_embedding_weights, parse_fine_tuned_lora_name
    unexpected: List[str] = []
    for tname in tensors:
        if is_base_embedding_weights(tname) or "base_layer" in tname:
            continue
        if skip_prefixes and LoRAModel._should_skip_module(tname, skip_prefixes):
            continue
        module_name, _ = parse_fine_tuned_lora_name(tname, weights_mapper)
        base_name = module_name.rsplit(".", 1)[-1]
        if ".experts" in module_name:
            if module_name[module_name.find(".experts") + 1:] not in expected:
                unexpected.append(module_name)
        elif base_name not in expected and \
                base_name not in (peft_helper.modules_to_save or ()):
            unexpected.append(module_name)
    if unexpected:
        raise ValueError(
            f"While loading {path}, expected"
            f" target modules in {expected}"
            f" but received {unexpected}."
            f" Please verify that the loaded LoRA module is correct")


def _full_linear_sizes(layer: Any) -> Optional[Tuple[int, List[int]]]:
    """(inputs, [outputs of each packed slice]) of the linear layer a vLLM
    LoRA layer wraps, full (unsharded) as an adapter's tensors are, or None
    where they cannot be told (not a linear layer, odd attributes).

    vLLM 0.32 keeps them on the wrapped layer (`layer.base_layer`, a
    LinearBase): `input_size` and `output_size` are the full sizes under
    tensor parallelism (the per-rank ones are `input_size_per_partition`,
    `output_size_per_partition`, `output_partition_sizes`); a
    MergedColumnParallelLinear's `output_sizes` are its slices' full sizes
    (gate_proj, up_proj). A QKVParallelLinear's `output_sizes` count a KV
    head replicated over ranks (tp > KV heads) once per rank, so its slices
    come from `total_num_heads`, `total_num_kv_heads`, `head_size`,
    `v_head_size`: the q, k and v rows vLLM's LoRA layer slices a full
    lora_B by."""
    try:
        from vllm.model_executor.layers.linear import LinearBase
    except ImportError:
        return None
    base = getattr(layer, "base_layer", None)
    if not isinstance(base, LinearBase):
        return None

    def size(x: Any) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and x > 0

    inputs: Any
    output: Any
    inputs, output = getattr(base, "input_size", None), \
        getattr(base, "output_size", None)
    if not size(inputs):
        return None
    sizes = getattr(base, "output_sizes", None)
    heads: List[Any] = [getattr(base, k, None) for k in
                        ("total_num_heads", "total_num_kv_heads", "head_size")]
    if isinstance(sizes, (list, tuple)) and len(sizes) == 3 and \
            all(size(h) for h in heads):
        nh, nkv, hs = heads
        v = getattr(base, "v_head_size", hs)
        outs = [nh * hs, nkv * hs, nkv * (v if size(v) else hs)]
    elif isinstance(sizes, (list, tuple)) and sizes:
        outs = list(sizes)
        if size(output) and sum(outs) != output:
            return None  # not what we take it for
    elif size(output):
        outs = [output]
    else:
        return None
    if not all(size(o) for o in outs):
        return None
    return inputs, outs


def _module_sizes(adapter_manager: Any) -> Dict[str, Tuple[int, Optional[int]]]:
    """{module name, as vLLM names an adapter's modules (e.g.
    model.layers.0.self_attn.q_proj): (inputs, outputs or None)} for every
    linear LoRA layer of the model, full sizes (`_full_linear_sizes`).

    vLLM's manager keeps its LoRA layers in `modules` ({vLLM module name:
    BaseLayerWithLoRA}, e.g. model.layers.0.self_attn.qkv_proj) and the
    adapter modules packed into one in `packed_modules` ({vLLM module name:
    [full names of its parts]}, from the model's packed_modules_mapping,
    e.g. qkv_proj: q_proj, k_proj, v_proj; gate_up_proj: gate_proj,
    up_proj): part i has the layer's inputs and slice i's outputs (None
    where the parts are not one slice each). A layer the model does not
    pack is its own module, with all its outputs. Kept per manager: the
    layers do not change."""
    cached: Optional[Dict[str, Tuple[int, Optional[int]]]] = \
        adapter_manager.__dict__.get("_wt_module_sizes")
    if cached is not None:
        return cached
    out: Dict[str, Tuple[int, Optional[int]]] = {}
    packed = getattr(adapter_manager, "packed_modules", None) or {}
    for name, layer in (getattr(adapter_manager, "modules", None) or {}).items():
        try:
            sizes = _full_linear_sizes(layer)
        except Exception:  # noqa: BLE001  (unknown sizes: no check)
            sizes = None
        if sizes is None:
            continue
        inputs, outs = sizes
        parts = packed.get(name)
        if parts:
            for i, part in enumerate(parts):
                out[part] = (inputs, outs[i] if len(parts) == len(outs) else None)
        else:
            out[name] = (inputs, sum(outs))
    adapter_manager.__dict__["_wt_module_sizes"] = out
    return out


def _check_tensor_shapes(path: str, tensors: Dict[str, Any],
                         sizes: Dict[str, Tuple[int, Optional[int]]],
                         peft_helper: Any, weights_mapper: Any,
                         skip_prefixes: Any) -> None:
    """Every lora_A [r, inputs] and lora_B [outputs, r] against the module
    it targets in the running model (`sizes`, `_module_sizes`); a module
    whose sizes are not known is not checked. ValueError naming `path`, the
    tensor, its shape and the module's size."""
    from vllm.lora.lora_model import LoRAModel
    from vllm.lora.utils import is_base_embedding_weights, parse_fine_tuned_lora_name
    modules_to_save = peft_helper.modules_to_save or ()
    for tname, t in tensors.items():
        if is_base_embedding_weights(tname) or "base_layer" in tname:
            continue
        if not tname.endswith((".lora_A.weight", ".lora_B.weight")):
            continue
        if skip_prefixes and LoRAModel._should_skip_module(tname, skip_prefixes):
            continue
        module, is_a = parse_fine_tuned_lora_name(tname, weights_mapper)
        if module in modules_to_save or module not in sizes:
            continue
        inputs, outputs = sizes[module]
        shape = list(t.shape)
        if len(shape) != 2:
            continue  # _peft_config refuses these
        want, got, what = (inputs, shape[1], "inputs") if is_a else \
            (outputs, shape[0], "outputs")
        if want is not None and got != want:
            raise ValueError(
                f"While loading {path}: tensor '{tname}' is {shape}, but "
                f"module {module} has {want} {what}")


def _load_wt_adapter(manager: Any, lora_request: Any) -> Any:
    """WorkerLoRAManager._load_adapter for a wt lora_path: vLLM's steps for
    a checkpoint directory, the tensors and the config from the export."""
    from vllm.lora.peft_helper import PEFTHelper
    name = lora_request.lora_name
    src = parse_lora_path(lora_request.lora_path)
    tensors = _copy_version(src, name)
    config = _peft_config(name, tensors, src.alpha)
    config["vllm_max_position_embeddings"] = manager.max_position_embeddings
    peft_helper = PEFTHelper.from_dict(config)
    # vLLM's refusals, in its words ("LoRA rank R is greater than
    # max_lora_rank M.", ...)
    peft_helper.validate_legal(manager.lora_config)

    model = manager._adapter_manager.model
    hf_to_vllm_mapper = getattr(model, "hf_to_vllm_mapper", None)
    if hf_to_vllm_mapper is not None:
        hf_to_vllm_mapper = hf_to_vllm_mapper.get_rename_mapper()
    lora_skip_prefixes = getattr(model, "lora_skip_prefixes", None)
    _check_target_modules(lora_request.lora_path, tensors,
                          _expected_lora_modules(manager), peft_helper,
                          hf_to_vllm_mapper, lora_skip_prefixes)
    # vLLM checks no shape: a wrong one would fail only after its manager
    # removed the served version (load_inplace)
    _check_tensor_shapes(lora_request.lora_path, tensors,
                         _module_sizes(manager._adapter_manager), peft_helper,
                         hf_to_vllm_mapper, lora_skip_prefixes)
    moe_ep_spec = getattr(manager._adapter_manager, "moe_ep_load_spec", None)
    if moe_ep_spec is not None:
        from vllm.lora.lora_model import _is_remote_expert_key
        tensors = {k: v for k, v in tensors.items()
                   if not _is_remote_expert_key(k, moe_ep_spec)}

    lora = manager._lora_model_cls.from_lora_tensors(
        lora_model_id=lora_request.lora_int_id,
        tensors=tensors,
        peft_helper=peft_helper,
        device="cpu",
        dtype=manager.lora_config.lora_dtype,
        model_vocab_size=manager.vocab_size,
        weights_mapper=hf_to_vllm_mapper,
        skip_prefixes=lora_skip_prefixes,
    )
    lora.is_3d_lora_weight = lora_request.is_3d_lora_weight
    manager._adapter_manager._validate_moe_lora_format(lora)
    manager._adapter_manager._validate_modules_to_save(lora)
    manager._adapter_manager._validate_token_classification_lora(lora)
    return lora


__all__: List[str] = ["AdapterSource", "lora_path", "parse_lora_path",
                      "is_wt_lora_path", "load_adapter_on_vllm",
                      "install_vllm_loader", "SCHEME", "adapter_init_info",
                      "lora_tensors", "adapter_lora_path", "load_adapter"]
