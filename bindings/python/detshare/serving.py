"""Prefill/decode multiplexing for serving engines: what an engine's scheduler
needs to run prefill and decode side by side through libdetshare.

An LLM serving engine runs two kinds of work: prefill (a prompt chunk, long,
compute-bound, judged by time to first token, TTFT) and decode (one token for
every running request, short, memory-bound, judged by time per output token,
TPOT). :class:`PDMux` gives them a vCtx each (phases ``prefill`` and
``decode``) and lets one scheduler thread drive both::

    rt = detshare.Runtime("cuda", tiers=serving.pool_tiers(sm_count), policy="slo_aware")
    mux = serving.PDMux(rt, "tpot_first", tpot_slo_us=40_000, max_batch=32)
    mux.capture_decode(lambda bs: model.decode_step(bs))      # one graph per (bucket, pCtx)
    ticket = mux.prefill(lambda stream: model.prefill(chunk))  # runs on the prefill worker
    while running:
        logits = mux.decode(len(running), inputs=stage_inputs) # replays the bucket's graph
        mux.synchronize_decode()
        if ticket.done(): first_tokens = ticket.result()

Modes (:data:`MODES`):

- ``single``: one vCtx (latency-sensitive, policy ``priority``) runs both on
  one stream; :meth:`PDMux.prefill` runs the chunk on the calling thread and
  returns once it is done, so decode waits behind it, as in an engine
  without multiplexing.
- ``pdmux_static``: SGLang's PD multiplexing (python/sglang/srt/multiplex,
  ``pdmux_context.py``: ``divide_sm``; ``multiplexing_mixin.py``:
  ``adjust_stream_groups``). ``sm_group_num`` stream groups: group 0 gives
  both sides the whole GPU (prefill only), groups 1..G-2 split the SMs
  (:func:`divide_sm`, largest prefill share first), group G-1 the whole GPU
  again (decode only). While both run the group is
  ``max(1, min(G-2, decode_bs*(G-2)//decode_bs_divisor))``. Here the helper
  remaps the two vCtxs to the pCtxs of the group under the ``manual``
  policy, at its next kernel boundary (SGLang switches streams and
  synchronizes).
- any other name (``slo_aware``, ``slo_aware_nogates``, ``tpot_first``, a
  registered policy): decode vCtx latency-sensitive with ``slo_us =
  tpot_slo_us`` (where the engine reports each finished request's TPOT
  with :meth:`PDMux.record_tpot`, its policy sizes decode's SMs from
  them); prefill vCtx latency-sensitive with ``slo_us = ttft_slo_us``
  where that is given (the engine reports each request's TTFT with
  :meth:`PDMux.record_ttft`; ``slo_aware`` runs it beside BE, urgent and
  unheld, off decode's SMs), else best-effort; the runtime's policy of that
  name places them (``tpot_first`` keeps decode on its own SMs and gates
  prefill).

Threads: the scheduler thread (the one that creates the :class:`PDMux`, or
any one thread, always the same) owns the decode vCtx: it calls
:meth:`PDMux.decode`, :meth:`PDMux.synchronize_decode`,
:meth:`PDMux.capture_decode` and :meth:`PDMux.close`. Prefill chunks run on a
worker thread the helper starts, which owns the prefill vCtx: a policy may
hold prefill at its gate or window, which blocks the thread that launches,
and that must not be the thread that keeps decode going. :meth:`PDMux.prefill`
returns at once with a :class:`PrefillTicket`. Python threads share the
interpreter lock: PyTorch releases it while it dispatches an operator, and a
decode step is one graph replay, so the scheduler thread waits little for it;
lowering ``sys.setswitchinterval`` (default 5 ms) shortens the waits that
remain.

Decode graphs: one :class:`~detshare.Graph` per batch-size bucket
(:func:`default_buckets`: 1, 2, 4, 8 and multiples of 8, as SGLang's CUDA graph
runner captures), each instantiated on every pCtx of the pool, all in one
``torch.cuda.MemPool`` (largest bucket first, so the others reuse its freed
blocks). A step of ``n`` requests replays the smallest bucket >= n; the
engine pads its inputs to it. On the simulated device
:meth:`PDMux.capture_decode_raw` takes capture functions instead.

:class:`RequestStats` keeps the per-request times an engine reports: TTFT,
TPOT (from the first token to the last, over the tokens after the first, as
SGLang's and vLLM's benchmarks define it), SLO violations and goodput.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .errors import BusyError, InvalidArgumentError, InvalidHandleError, NotFoundError
from .runtime import Anchor, Graph, Runtime, Tier, VCtx, _int, _real, _str, _u32

#: the modes :class:`PDMux` knows by name; any other is taken as a policy name
MODES = ("single", "pdmux_static", "slo_aware", "slo_aware_nogates", "tpot_first")

#: SGLang's PDMuxConfig defaults
SM_GROUP_NUM = 8
DECODE_BS_DIVISOR = 36


# ---------------------------------------------------------------------------
# SGLang's stream groups


def divide_sm(total_sms: int, parts: int, *, min_per_part: int = 8, multiple: int = 8) -> List[int]:
    """SGLang's ``divide_sm`` (pdmux_context.py) for compute capability 9.x:
    the prefill SM counts ``x`` with ``x >= total_sms - x`` and
    ``total_sms - x >= 16`` in steps of ``multiple`` from ``min_per_part``,
    thinned to at most ``parts``, largest prefill share first. 132 SMs and 6
    parts give [112, 104, 96, 88, 80, 72].

    Args:
        total_sms: SMs of the GPU, >= 1.
        parts: how many splits, >= 0.
        min_per_part, multiple: the architecture's green-context constraints
            (Hopper: 8 and 8).

    Returns:
        the prefill SM counts (the decode side gets the rest); empty when no
        split fits.

    Raises:
        ValueError: a negative count or a non-positive ``multiple``.
    """
    if total_sms < 1 or parts < 0 or min_per_part < 1 or multiple < 1:
        raise ValueError(f"divide_sm({total_sms}, {parts}, {min_per_part}, {multiple}): counts must be positive")
    possible = [x for x in range(min_per_part, total_sms - min_per_part + 1, multiple)
                if x >= total_sms - x and total_sms - x >= 16]
    if not possible or parts == 0:
        return []
    step = max(len(possible) // parts, 1) if len(possible) >= parts else 1
    return list(reversed(possible[::step][:parts]))


def pdmux_group(groups: int, decode_bs: int, prefill_live: bool, decode_bs_divisor: int = DECODE_BS_DIVISOR) -> int:
    """The stream group SGLang's ``adjust_stream_groups`` picks.

    Args:
        groups: G, the stream groups (``sm_group_num``), >= 3.
        decode_bs: requests in the running (decode) batch, >= 0.
        prefill_live: a prefill batch is running.
        decode_bs_divisor: SGLang's ``decode_bs_divisor`` (36), >= 1.

    Returns:
        ``max(1, min(G-2, decode_bs*(G-2)//decode_bs_divisor))`` while both
        run; G-1 (whole GPU for decode) for decode only; 0 (whole GPU for
        prefill) otherwise.

    Raises:
        ValueError: ``groups < 3``, ``decode_bs < 0`` or ``decode_bs_divisor < 1``.
    """
    if groups < 3 or decode_bs < 0 or decode_bs_divisor < 1:
        raise ValueError(f"pdmux_group({groups}, {decode_bs}, ..., {decode_bs_divisor}): groups >= 3, "
                         "decode_bs >= 0, divisor >= 1")
    if decode_bs > 0 and prefill_live:
        return max(1, min(groups - 2, decode_bs * (groups - 2) // decode_bs_divisor))
    return groups - 1 if decode_bs > 0 else 0


def pool_tiers(total_sms: int, *, ls_tiers: Sequence[int] = (16, 32, 64),
               sm_group_num: int = SM_GROUP_NUM) -> List[Tier]:
    """A pool for every mode of :class:`PDMux`: the whole GPU; for each of
    ``ls_tiers`` a LOW tier of that many SMs and its HIGH complement (what
    ``slo_aware`` and ``tpot_first`` place on); and :func:`divide_sm`'s
    splits, prefill LOW and decode HIGH (``pdmux_static``). Pass it as
    ``Runtime(tiers=...)``.

    Args:
        total_sms: SMs of the device (``torch.cuda.get_device_properties(0)
            .multi_processor_count``; the simulated device's ``sm_count``).
        ls_tiers: LOW tier sizes, SMs; those leaving fewer than 8 SMs are
            skipped.
        sm_group_num: SGLang's stream groups (splits = ``sm_group_num - 2``).

    Returns:
        the tiers, whole GPU first.

    Raises:
        ValueError: ``total_sms < 1`` or ``sm_group_num < 3``.
    """
    if total_sms < 1 or sm_group_num < 3:
        raise ValueError(f"pool_tiers({total_sms}, sm_group_num={sm_group_num}): need >= 1 SM and >= 3 groups")
    tiers = [Tier(total_sms, Anchor.FULL)]
    for low in ls_tiers:
        if 0 < low and low + 8 <= total_sms:
            tiers += [Tier(low, Anchor.LOW), Tier(total_sms - low, Anchor.HIGH)]
    for p in divide_sm(total_sms, sm_group_num - 2):
        tiers += [Tier(p, Anchor.LOW), Tier(total_sms - p, Anchor.HIGH)]
    return tiers


def default_buckets(max_batch: int) -> Tuple[int, ...]:
    """Decode batch-size buckets: 1, 2, 4, 8, then multiples of 8 up to
    ``max_batch`` (which is always the last), as SGLang's CUDA graph runner
    captures.

    Raises:
        ValueError: ``max_batch < 1``.
    """
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, not {max_batch}")
    b = [x for x in (1, 2, 4, 8) if x < max_batch] + list(range(16, max_batch, 8))
    return tuple(b + [max_batch])


# ---------------------------------------------------------------------------
# prefill tickets and statistics


class PrefillTicket:
    """One prefill chunk submitted with :meth:`PDMux.prefill`.

    Attributes:
        submitted_s, started_s, finished_s: ``time.perf_counter()`` seconds
            when it was submitted, when the worker began it and when its
            function returned (``None`` until then).
    """

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self._fn = fn
        self._done = threading.Event()
        self._result: Any = None
        self._error: Optional[BaseException] = None
        self.submitted_s = time.perf_counter()
        self.started_s: Optional[float] = None
        self.finished_s: Optional[float] = None

    def done(self) -> bool:
        """Whether the chunk's function has returned (or raised). Any thread."""
        return self._done.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until done, at most ``timeout`` seconds (``None`` = no
        bound); returns :meth:`done`."""
        return self._done.wait(timeout)

    def result(self, timeout: Optional[float] = None) -> Any:
        """What the chunk's function returned, waiting for it first.

        Raises:
            TimeoutError: not done within ``timeout`` seconds.
            the function's own exception, if it raised.
        """
        if not self._done.wait(timeout):
            raise TimeoutError("prefill chunk not done")
        if self._error is not None:
            raise self._error
        return self._result

    def _run(self, vctx: VCtx, on_done: Callable[["PrefillTicket"], None]) -> None:
        self.started_s = time.perf_counter()
        try:
            with vctx.section() as s:
                self._result = self._fn(s)
        except BaseException as e:  # noqa: BLE001 (handed to the caller through result())
            self._error = e
        finally:
            self.finished_s = time.perf_counter()
            self._fn = None  # type: ignore[assignment]
            try:
                on_done(self)
            finally:
                self._done.set()  # whatever on_done raised: a waiter must never hang


@dataclass
class PDMuxStats:
    """Counters of a :class:`PDMux` (:meth:`PDMux.stats` returns a copy).

    ``decode_enqueue_us`` and ``decode_step_us`` keep the last 100000 steps:
    the host time of :meth:`PDMux.decode` (input staging, the replay call and
    output copies; the engine's own bookkeeping not included) and the wall time from the
    start of :meth:`PDMux.decode` to the return of the
    :meth:`PDMux.synchronize_decode` that followed it (microseconds).
    """

    prefills: int = 0  #: prefill chunks finished
    prefill_errors: int = 0  #: of which raised
    decode_steps: int = 0  #: decode graph replays
    steps_per_bucket: Dict[int, int] = field(default_factory=dict)  #: replays per bucket
    padded_slots: int = 0  #: bucket entries beyond the requests, summed over steps
    group_changes: int = 0  #: ``pdmux_static``: stream-group changes
    decode_enqueue_us: List[float] = field(default_factory=list)
    decode_step_us: List[float] = field(default_factory=list)


def percentile(xs: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of ``xs`` (``q`` in 0..100); NaN when empty."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(math.ceil(q * len(s) / 100.0)) - 1))
    return s[k]


class RequestStats:
    """Per-request times of a serving run: arrival, first token, last token.

    Times are ``time.perf_counter()`` seconds unless given. TTFT = first
    token - arrival; TPOT = (last token - first token) / (tokens - 1), for
    requests with at least two tokens (SGLang's bench_serving and vLLM's
    benchmark define it so). Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrival: Dict[Any, float] = {}
        self._first: Dict[Any, float] = {}
        self._last: Dict[Any, float] = {}
        self._tokens: Dict[Any, int] = {}

    def arrive(self, rid: Any, t: Optional[float] = None) -> None:
        """Marks request ``rid`` arrived (its TTFT counts from here).

        Raises:
            ValueError: ``rid`` arrived already.
        """
        t = time.perf_counter() if t is None else t
        with self._lock:
            if rid in self._arrival:
                raise ValueError(f"request {rid!r} arrived twice")
            self._arrival[rid] = t
            self._tokens[rid] = 0

    def tokens(self, rid: Any, n: int = 1, t: Optional[float] = None) -> None:
        """Request ``rid`` received ``n`` >= 1 more output tokens at ``t``
        (the first call sets its first-token time).

        Raises:
            KeyError: ``rid`` never arrived.
            ValueError: ``n < 1``, or ``t`` before its previous token.
        """
        if n < 1:
            raise ValueError(f"n must be >= 1, not {n}")
        t = time.perf_counter() if t is None else t
        with self._lock:
            if rid not in self._arrival:
                raise KeyError(f"request {rid!r} never arrived")
            prev = self._last.get(rid, self._arrival[rid])
            if t < prev:
                raise ValueError(f"request {rid!r}: token time {t} before {prev}")
            self._first.setdefault(rid, t)
            self._last[rid] = t
            self._tokens[rid] += n

    def __len__(self) -> int:
        with self._lock:
            return len(self._arrival)

    def ttft_s(self) -> Dict[Any, float]:
        """TTFT per request that has a token, seconds."""
        with self._lock:
            return {r: self._first[r] - self._arrival[r] for r in self._first}

    def _tpot(self, rid: Any) -> Optional[float]:
        """TPOT of ``rid`` (under the lock), or None before its second token."""
        n = self._tokens.get(rid, 0)
        return (self._last[rid] - self._first[rid]) / (n - 1) if n >= 2 else None

    def tpot_s_of(self, rid: Any) -> Optional[float]:
        """Request ``rid``'s TPOT so far, seconds; ``None`` before its second
        token (or if it never arrived)."""
        with self._lock:
            return self._tpot(rid)

    def tpot_s(self) -> Dict[Any, float]:
        """TPOT per request with >= 2 tokens, seconds."""
        with self._lock:
            return {r: t for r in self._first if (t := self._tpot(r)) is not None}

    def summary(self, ttft_slo_ms: float = math.inf, tpot_slo_ms: float = math.inf,
                duration_s: Optional[float] = None) -> Dict[str, float]:
        """Figures over every request that arrived.

        A request without a token violates the TTFT SLO; a request with one
        token has no TPOT and meets the TPOT SLO.

        Args:
            ttft_slo_ms, tpot_slo_ms: the SLOs, ms (``inf`` = none).
            duration_s: the run's length for the rates (``None`` = first
                arrival to last token).

        Returns:
            ``requests``, ``completed`` (with a token), ``ttft_p50_ms``,
            ``ttft_p99_ms``, ``tpot_p50_ms``, ``tpot_p99_ms``,
            ``ttft_slo_violation`` and ``tpot_slo_violation`` (fractions of
            the requests), ``slo_attainment`` (fraction meeting both),
            ``throughput_rps`` and ``goodput_rps`` (requests, and requests
            meeting both SLOs, per second), ``duration_s``.
        """
        ttft, tpot = self.ttft_s(), self.tpot_s()
        with self._lock:
            arrivals = dict(self._arrival)
            last = max(self._last.values(), default=None)
        n = len(arrivals)
        late_ttft = sum(1 for r in arrivals if r not in ttft or ttft[r] * 1e3 > ttft_slo_ms)
        late_tpot = sum(1 for r in tpot if tpot[r] * 1e3 > tpot_slo_ms)
        good = sum(1 for r in arrivals if r in ttft and ttft[r] * 1e3 <= ttft_slo_ms
                   and tpot.get(r, 0.0) * 1e3 <= tpot_slo_ms)
        if duration_s is None:
            duration_s = (last - min(arrivals.values())) if n and last is not None else 0.0
        rate = (lambda k: k / duration_s) if duration_s > 0 else (lambda k: float("nan"))
        tt = [v * 1e3 for v in ttft.values()]
        tp = [v * 1e3 for v in tpot.values()]
        return {
            "requests": n,
            "completed": len(ttft),
            "ttft_p50_ms": percentile(tt, 50), "ttft_p99_ms": percentile(tt, 99),
            "tpot_p50_ms": percentile(tp, 50), "tpot_p99_ms": percentile(tp, 99),
            "ttft_slo_violation": late_ttft / n if n else float("nan"),
            "tpot_slo_violation": late_tpot / n if n else float("nan"),
            "slo_attainment": good / n if n else float("nan"),
            "throughput_rps": rate(len(ttft)),
            "goodput_rps": rate(good),
            "duration_s": duration_s,
        }


# ---------------------------------------------------------------------------
# the multiplexer


_HIST = 100000


class PDMux:
    """A prefill vCtx and a decode vCtx (one vCtx in ``single``), decode graphs
    per bucket and pCtx, a prefill worker, and ``pdmux_static``'s stream
    groups. Read the module's documentation first.

    Args:
        runtime: the :class:`~detshare.Runtime`; its pool must hold the
            tiers the mode places on (:func:`pool_tiers` has all of them).
            The helper sets the runtime's policy: ``priority`` for
            ``single``, ``manual`` for ``pdmux_static``, else ``mode``.
        mode: one of :data:`MODES` or a registered policy's name.
        tpot_slo_us: the decode vCtx's ``slo_us`` (TPOT objective, us; 0 =
            none); ``single``'s vCtx gets it too.
        ttft_slo_us: the prefill vCtx's ``slo_us`` (TTFT objective, us); 0
            (default) = none: prefill is best-effort. Not used in
            ``single`` (one vCtx).
        max_batch: most requests in a decode step, >= 1.
        buckets: decode batch sizes to capture, ascending, the last >=
            ``max_batch``; ``None`` = :func:`default_buckets`.
        sm_group_num, decode_bs_divisor: ``pdmux_static``'s parameters
            (SGLang's PDMuxConfig; 8 and 36).
        name: prefix of the vCtx names (``<name>-prefill``,
            ``<name>-decode``; ``<name>`` in ``single``).

    Raises:
        ValueError: an empty mode, buckets not ascending and distinct or
            not reaching ``max_batch``.
        InvalidArgumentError: (a ValueError too) ``max_batch`` or a bucket
            < 1, ``sm_group_num < 3``, ``decode_bs_divisor < 1``,
            ``tpot_slo_us`` or ``ttft_slo_us`` outside 0..2**32-1; checked before the
            runtime's policy is set or anything is made.
        TypeError: ``max_batch``, a bucket, ``sm_group_num``,
            ``decode_bs_divisor``, ``tpot_slo_us`` or ``ttft_slo_us`` not an int (a float, a
            bool), ``buckets`` not a sequence, ``name`` not a str.
        NotFoundError: ``pdmux_static`` on a pool without a pCtx of one of
            its splits (the message names it), or no such policy.
        DetShareError: what creating the vCtxs raises (e.g. LimitError).

    Thread-safety: see the module's documentation; :meth:`stats`,
    :meth:`adjust` and :class:`PrefillTicket` from any thread.
    """

    def __init__(
        self,
        runtime: Runtime,
        mode: str,
        *,
        tpot_slo_us: int = 0,
        ttft_slo_us: int = 0,
        max_batch: int = 32,
        buckets: Optional[Sequence[int]] = None,
        sm_group_num: int = SM_GROUP_NUM,
        decode_bs_divisor: int = DECODE_BS_DIVISOR,
        name: str = "serve",
    ) -> None:
        if not isinstance(mode, str) or not mode:
            raise ValueError(f"mode must be a non-empty string, not {mode!r}")
        fn = "PDMux"
        name = _str("name", name, fn)
        tpot_slo_us = _u32("tpot_slo_us", tpot_slo_us, fn)  # the decode vCtx's slo_us
        ttft_slo_us = _u32("ttft_slo_us", ttft_slo_us, fn)  # the prefill vCtx's
        max_batch = _int("max_batch", max_batch, 1, None, fn)
        if buckets is not None and (isinstance(buckets, (str, bytes)) or not isinstance(buckets, Sequence)):
            raise TypeError(f"{fn}: buckets must be a sequence of ints or None, not {type(buckets).__name__}")
        bk = tuple(default_buckets(max_batch) if buckets is None
                   else (_int(f"buckets[{i}]", b, 1, None, fn) for i, b in enumerate(buckets)))
        if not bk or list(bk) != sorted(set(bk)) or bk[-1] < max_batch:
            raise ValueError(f"buckets must be ascending, distinct, >= 1 and end at >= max_batch "
                             f"({max_batch}), not {bk}")
        sm_group_num = _int("sm_group_num", sm_group_num, 3, None, fn)
        decode_bs_divisor = _int("decode_bs_divisor", decode_bs_divisor, 1, None, fn)
        self.runtime = runtime
        self.mode = mode
        self.max_batch = max_batch
        self.buckets: Tuple[int, ...] = bk
        self.tpot_slo_us = tpot_slo_us
        self.ttft_slo_us = ttft_slo_us
        self._lock = threading.Lock()
        self._stats = self._new_stats()
        self._graphs: Dict[int, Graph] = {}
        self._pool: Any = None
        self._decode_t0: Optional[float] = None
        self._closed = False
        self._worker: Optional[threading.Thread] = None
        self._queue: "queue.Queue[Optional[PrefillTicket]]" = queue.Queue()
        self._prefill_live = 0
        self._decode_bs = 0
        self._group = -1
        self._groups: List[Tuple[int, int]] = []  # (prefill pCtx, decode pCtx) per group
        self.prefill_vctx: VCtx
        self.decode_vctx: VCtx

        info = runtime.info()
        if mode == "pdmux_static":
            self._groups = self._find_groups(info, sm_group_num)
            self._divisor = decode_bs_divisor
        policy = {"single": "priority", "pdmux_static": "manual"}.get(mode, mode)
        runtime.set_policy(policy)
        self.policy = policy
        if mode == "single":
            v = runtime.vctx(name, cls="ls", slo_us=tpot_slo_us)
            self.prefill_vctx = self.decode_vctx = v
        else:
            self.prefill_vctx = (runtime.vctx(f"{name}-prefill", cls="ls", phase="prefill", slo_us=ttft_slo_us)
                                 if ttft_slo_us else runtime.vctx(f"{name}-prefill", cls="be", phase="prefill"))
            try:
                self.decode_vctx = runtime.vctx(f"{name}-decode", cls="ls", phase="decode", slo_us=tpot_slo_us)
            except BaseException:
                self.prefill_vctx.close()
                raise
            self._worker = threading.Thread(target=self._work, name=f"{name}-prefill", daemon=True)
            self._worker.start()
        if self._groups:
            self._set_group(0)

    # -- pdmux_static ------------------------------------------------------------

    @staticmethod
    def _find_groups(info: Any, sm_group_num: int) -> List[Tuple[int, int]]:
        def find(sms: int, anchor: Anchor) -> int:
            for p in info.pctx:
                if p.sm_count == sms and p.anchor == anchor:
                    return p.index
            raise NotFoundError(f"pdmux_static: the pool has no {anchor.name} pCtx of {sms} SMs "
                                "(serving.pool_tiers lists the tiers it needs)", function="PDMux")

        full = info.full_pctx
        splits = divide_sm(info.sm_count, sm_group_num - 2)
        if not splits:
            raise NotFoundError(f"pdmux_static: no prefill/decode split of {info.sm_count} SMs", function="PDMux")
        groups = [(full, full)]
        groups += [(find(p, Anchor.LOW), find(info.sm_count - p, Anchor.HIGH)) for p in splits]
        groups.append((full, full))
        return groups

    def adjust(self, decode_bs: Optional[int] = None) -> int:
        """Tells the helper the running batch's size (``decode_bs`` >= 0;
        ``None`` = keep the last) and, in ``pdmux_static``, re-chooses the
        stream group (:func:`pdmux_group`), remapping the vCtxs if it
        changed. SGLang re-chooses at three points: a prefill batch starts,
        one ends (:meth:`prefill` and its worker call this then), and the
        running batch empties (call ``adjust(0)``); :meth:`decode` only
        records its batch size for the next choice. Any thread.

        Returns:
            the current stream group (``pdmux_static``), else -1.

        Raises:
            InvalidArgumentError: ``decode_bs < 0`` (a ValueError too).
            TypeError: ``decode_bs`` neither an int nor ``None``.
        """
        if decode_bs is not None:
            decode_bs = _int("decode_bs", decode_bs, 0, None, "PDMux.adjust")
        with self._lock:
            if decode_bs is not None:
                self._decode_bs = decode_bs
            if not self._groups:
                return -1
            g = pdmux_group(len(self._groups), self._decode_bs, self._prefill_live > 0, self._divisor)
            if g != self._group:
                self._set_group(g)
            return g

    def _set_group(self, g: int) -> None:
        p, d = self._groups[g]
        self.prefill_vctx.remap(p)
        self.decode_vctx.remap(d)
        if self._group >= 0:
            self._stats.group_changes += 1
        self._group = g

    @property
    def group(self) -> int:
        """``pdmux_static``'s current stream group, else -1."""
        return self._group if self._groups else -1

    @property
    def groups(self) -> Tuple[Tuple[int, int], ...]:
        """``pdmux_static``: (prefill pCtx, decode pCtx) of each stream group."""
        return tuple(self._groups)

    # -- prefill -----------------------------------------------------------------

    def prefill(self, fn: Callable[[Any], Any], *, decode_bs: Optional[int] = None) -> PrefillTicket:
        """Runs one prefill chunk: ``fn(stream)`` in a section of the prefill
        vCtx (``stream`` as :meth:`VCtx.section` yields it: a
        ``torch.cuda.ExternalStream`` when the program uses torch on a GPU,
        else the ``CUstream`` as int). ``fn`` enqueues the chunk on that
        stream and returns what the scheduler needs (e.g. the first tokens,
        read back with ``.tolist()``, which waits for the chunk on that
        stream).

        In ``single`` it runs on the calling thread and the returned ticket is
        done. Otherwise it is queued for the prefill worker (chunks run one
        at a time, in submission order) and this returns at once.

        Args:
            fn: ``fn(stream) -> Any``.
            decode_bs: the running batch's size now (>= 0), recorded before
                ``pdmux_static`` re-chooses its group for the new chunk;
                ``None`` = the size the last :meth:`decode` or
                :meth:`adjust` recorded.

        Returns:
            a :class:`PrefillTicket`; its ``result()`` is ``fn``'s value or
            raises ``fn``'s exception.

        Raises:
            InvalidHandleError: the helper is closed.
            TypeError: ``fn`` is not callable; ``decode_bs`` neither an int
                nor ``None``.
            InvalidArgumentError: ``decode_bs < 0`` (a ValueError too).
        """
        if self._closed:
            raise InvalidHandleError("PDMux is closed", function="PDMux.prefill")
        if not callable(fn):
            raise TypeError(f"fn must be callable, not {type(fn).__name__}")
        if decode_bs is not None:
            decode_bs = _int("decode_bs", decode_bs, 0, None, "PDMux.prefill")
        t = PrefillTicket(fn)
        with self._lock:
            self._prefill_live += 1
        try:
            self.adjust(decode_bs)
        except BaseException:
            with self._lock:
                self._prefill_live -= 1
            raise
        if self._worker is None:
            t._run(self.prefill_vctx, self._prefill_done)
        else:
            self._queue.put(t)
        return t

    def _prefill_done(self, t: PrefillTicket) -> None:
        with self._lock:
            self._prefill_live -= 1
        try:
            self.adjust()
        except BaseException as e:  # noqa: BLE001 (the ticket carries it: a remap failed, e.g. a device fault)
            if t._error is None:
                t._error = e
        with self._lock:
            self._stats.prefills += 1
            self._stats.prefill_errors += t._error is not None

    def _work(self) -> None:
        while True:
            t = self._queue.get()
            if t is None:
                return
            t._run(self.prefill_vctx, self._prefill_done)

    @property
    def prefill_live(self) -> int:
        """Prefill chunks submitted and not finished."""
        with self._lock:
            return self._prefill_live

    # -- decode ------------------------------------------------------------------

    def bucket(self, n: int) -> int:
        """The smallest bucket >= ``n``.

        Raises:
            ValueError: ``n < 1`` or ``n > max_batch``.
            TypeError: ``n`` not an int (a float, a bool).
        """
        if isinstance(n, bool) or not hasattr(type(n), "__index__"):
            raise TypeError(f"PDMux.bucket: n must be an int, not {type(n).__name__}")
        if not 1 <= n <= self.max_batch:
            raise ValueError(f"a decode step takes 1..{self.max_batch} requests, not {n}")
        return self.buckets[bisect.bisect_left(self.buckets, n)]  # the last bucket is >= max_batch

    def capture_decode(self, step: Callable[[int], Any], *, warmup: int = 1) -> None:
        """Captures the decode step of every bucket as a graph of the decode
        vCtx, instantiated on every pCtx of the pool (:meth:`VCtx.graph`),
        largest bucket first, all in one ``torch.cuda.MemPool``.

        ``step(bs)`` enqueues one decode step over the first ``bs`` entries
        of the engine's static input tensors on the current stream and
        returns its outputs (tensors of a shape that depends on ``bs`` only);
        the rules of :meth:`VCtx.graph` apply (no host reads, no
        synchronization, static shapes).

        Args:
            step: ``step(bs: int) -> Tensor | tuple of Tensors``.
            warmup: eager runs per bucket before its captures.

        Raises:
            BusyError: graphs were captured already (:meth:`close` them first).
            ValueError: the runtime is on the simulated device (use
                :meth:`capture_decode_raw`).
            CaptureError, TypeError: as :meth:`VCtx.graph` (graphs captured
                before the failing one are closed again).
        """
        if self.runtime.device != "cuda":
            raise ValueError("capture_decode captures PyTorch work and needs a CUDA device; on the simulated "
                             "device use capture_decode_raw")
        import torch

        self._capture(lambda bs: self.decode_vctx.graph(lambda: step(bs), warmup=warmup, name=f"decode-bs{bs}",
                                                        pool=self._pool),
                      lambda: torch.cuda.MemPool())

    def capture_decode_raw(self, capture: Callable[[int, int], Optional[int]]) -> None:
        """:meth:`capture_decode` without PyTorch (any device, the simulated
        one too): ``capture(bs, stream)`` enqueues bucket ``bs``'s step on
        the capturing ``CUstream`` (an int), as :meth:`VCtx.graph_raw`'s
        capture function.

        Raises:
            BusyError: graphs were captured already.
            CaptureError: as :meth:`VCtx.graph_raw`.
        """
        self._capture(lambda bs: self.decode_vctx.graph_raw(lambda s: capture(bs, s), name=f"decode-bs{bs}"),
                      lambda: None)

    def _capture(self, make: Callable[[int], Graph], new_pool: Callable[[], Any]) -> None:
        if self._closed:
            raise InvalidHandleError("PDMux is closed", function="PDMux.capture_decode")
        if self._graphs:
            raise BusyError("decode graphs are captured already", function="PDMux.capture_decode")
        self._pool = new_pool()
        try:
            for bs in reversed(self.buckets):
                self._graphs[bs] = make(bs)
        except BaseException:
            self._close_graphs()
            raise

    @property
    def graphs(self) -> Dict[int, Graph]:
        """The decode graph of each bucket (empty before a capture)."""
        return dict(self._graphs)

    def decode(self, n: int, inputs: Optional[Callable[[Any], None]] = None,
               outputs: Optional[Callable[[Any, Any], None]] = None) -> Any:
        """Enqueues one decode step of ``n`` requests: ``inputs(stream)``, if
        given, in a section of the decode vCtx (copy the step's inputs into
        the static tensors there: ``static.copy_(pinned, non_blocking=True)``),
        then a replay of bucket :meth:`bucket` (n)'s graph, where the decode
        vCtx is bound now, then ``outputs(stream, graph_outputs)``, if given,
        in another section (copy results to pinned host memory there).
        Returns without waiting (:meth:`synchronize_decode`). Records ``n``
        as the running batch's size for :meth:`adjust`.

        Args:
            n: requests in the step, 1..``max_batch``; the engine fills the
                bucket's remaining entries with padding.
            inputs: ``inputs(stream) -> None``, on the scheduler thread.
            outputs: ``outputs(stream, graph_outputs) -> None``, likewise.

        Returns:
            the graph's static outputs (:attr:`Graph.outputs`; read them after
            :meth:`synchronize_decode`).

        Raises:
            ValueError: ``n`` out of range.
            TypeError: ``n`` not an int.
            BusyError: no decode graphs (capture first).
            DetShareError: what the replay raises (:meth:`Graph.replay`).
        """
        t0 = time.perf_counter()
        b = self.bucket(n)
        g = self._graphs.get(b)
        if g is None:
            raise BusyError("no decode graphs: call capture_decode first", function="PDMux.decode")
        with self._lock:
            self._decode_bs = n  # for the next stream-group choice (SGLang does not re-choose per step)
        if inputs is not None:
            with self.decode_vctx.section() as s:
                inputs(s)
        out = g.replay()
        if outputs is not None:
            with self.decode_vctx.section() as s:
                outputs(s, out)
        t1 = time.perf_counter()
        with self._lock:
            st = self._stats
            st.decode_steps += 1
            st.steps_per_bucket[b] = st.steps_per_bucket.get(b, 0) + 1
            st.padded_slots += b - n
            st.decode_enqueue_us.append((t1 - t0) * 1e6)
        self._decode_t0 = t0
        return out

    def synchronize_decode(self) -> None:
        """Waits for the decode vCtx's work (:meth:`VCtx.synchronize`) and
        records the step time of the last :meth:`decode`.

        Raises:
            DeviceFaultError, DriverError: the device failed.
        """
        self.decode_vctx.synchronize()
        t0, self._decode_t0 = self._decode_t0, None
        if t0 is not None:
            dt = (time.perf_counter() - t0) * 1e6
            with self._lock:
                self._stats.decode_step_us.append(dt)

    def record_ttft(self, latency_us: float) -> None:
        """Records one request's time to first token on the prefill vCtx
        (``ds_vctx_request_record``): the requests its policy judges against
        ``ttft_slo_us``. Does nothing in ``single`` (its one vCtx runs decode
        too) or without a ``ttft_slo_us``.

        Args:
            latency_us: the request's TTFT, us, from its arrival: a finite
                number in 0..1e12.

        Raises:
            InvalidArgumentError: negative, above 1e12, NaN or infinite
                (nothing is recorded).
            TypeError: not a number.
            InvalidHandleError: the helper was closed.

        Any thread.
        """
        self._record("PDMux.record_ttft", self.prefill_vctx, self.ttft_slo_us, latency_us)

    def record_tpot(self, latency_us: float) -> None:
        """Records one finished request's time per output token on the
        decode vCtx (``ds_vctx_request_record``): the requests its policy
        judges against ``tpot_slo_us`` and sizes decode's SMs from
        (``slo_aware``, ``tpot_first``). Without it the decode vCtx records
        nothing, and decode stays on its policy's starting tier. TPOT as
        :class:`RequestStats` defines it: (last token - first token) /
        (tokens - 1), for a request with at least two tokens. A request's
        TPOT, not each step's time, because that is what the SLO judges: a
        single slow step need not make a request late. Does nothing in
        ``single`` (its one vCtx runs prefill too) or without a
        ``tpot_slo_us``.

        Measured (H100, serve_torch, docs/results/h100/serve_torch_shapes/
        decode_sizing/): decode's SMs come from prefill. Where the GPU
        cannot meet both SLOs, ``slo_aware`` grows decode and prefill
        misses its TTFT (0.34x the goodput without it on the Azure code
        trace at 0.4 of capacity); where it can, it removes TPOT misses.

        Args:
            latency_us: the request's TPOT, us: a finite number in 0..1e12.

        Raises:
            InvalidArgumentError: negative, above 1e12, NaN or infinite
                (nothing is recorded).
            TypeError: not a number.
            InvalidHandleError: the helper was closed.

        Any thread.
        """
        self._record("PDMux.record_tpot", self.decode_vctx, self.tpot_slo_us, latency_us)

    def _record(self, function: str, vctx: VCtx, slo_us: int, latency_us: float) -> None:
        """One request outcome on ``vctx`` where ``slo_us`` judges it, outside ``single``; else only checked."""
        if self._closed:
            raise InvalidHandleError("PDMux is closed", function=function)
        if self.mode == "single" or not slo_us:
            v = _real("latency_us", latency_us, function)  # the library's checks, nothing recorded
            if not 0.0 <= v <= 1e12:
                raise InvalidArgumentError(f"latency_us must be in 0..1e12, not {latency_us!r}", function=function)
            return
        vctx.request_record(latency_us)

    # -- statistics and teardown -----------------------------------------------------

    def stats(self) -> PDMuxStats:
        """A copy of the counters. Any thread."""
        with self._lock:
            s = self._stats
            return dataclasses.replace(s, steps_per_bucket=dict(s.steps_per_bucket),
                                       decode_enqueue_us=list(s.decode_enqueue_us),
                                       decode_step_us=list(s.decode_step_us))

    @staticmethod
    def _new_stats() -> PDMuxStats:
        """Counters whose sample lists keep the last _HIST entries (deques, copied out as lists)."""
        return PDMuxStats(decode_enqueue_us=deque(maxlen=_HIST), decode_step_us=deque(maxlen=_HIST))  # type: ignore

    def reset_stats(self) -> None:
        """Zeroes the counters (e.g. after warm-up). Any thread."""
        with self._lock:
            self._stats = self._new_stats()

    def _close_graphs(self) -> None:
        """Closes every graph, even after one raised; raises the first error."""
        graphs, self._graphs = list(self._graphs.values()), {}
        self._pool = None
        first: Optional[BaseException] = None
        for g in graphs:
            try:
                g.close()
            except BaseException as e:  # noqa: BLE001 (raised after the others are closed)
                first = first or e
        if first is not None:
            raise first

    def close(self) -> None:
        """Waits for queued prefill chunks, stops the worker, destroys the
        graphs and the vCtxs; each of them even if destroying another raised.
        Idempotent. Scheduler thread.

        Raises:
            the first error met (e.g. TimeoutError: a vCtx's work outlived the
            runtime's teardown timeout; DeviceFaultError): everything is
            destroyed anyway.
        """
        if self._closed:
            return
        self._closed = True
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join()
        first: Optional[BaseException] = None
        try:
            if not self.decode_vctx.closed:
                self._close_graphs()
        except BaseException as e:  # noqa: BLE001 (raised once the vCtxs are closed)
            first = e
        self._graphs.clear()
        self._pool = None
        for v in {id(self.prefill_vctx): self.prefill_vctx, id(self.decode_vctx): self.decode_vctx}.values():
            try:
                v.close()
            except BaseException as e:  # noqa: BLE001
                first = first or e
        if first is not None:
            raise first

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "PDMux":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<detshare.serving.PDMux {self.mode} buckets={list(self.buckets)} "
                f"{'closed' if self._closed else 'open'}>")


__all__ = [
    "DECODE_BS_DIVISOR",
    "MODES",
    "PDMux",
    "PDMuxStats",
    "PrefillTicket",
    "RequestStats",
    "SM_GROUP_NUM",
    "default_buckets",
    "divide_sm",
    "pdmux_group",
    "percentile",
    "pool_tiers",
]
