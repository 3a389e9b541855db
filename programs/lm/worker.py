"""The worker thread of ``engine.TorchEngine``: continuous batching of its callers, each request's failure its own.

One concept in one file: what runs when. Callers queue their jobs (``engine.TorchEngine.complete``) and wait; one
worker thread per engine serves the queue and hands each caller its job back; the work on the model is the batch
step's (``batch.Batcher``), which the worker drives.

- Continuous batching: the worker gathers what arrives within ``wait_s`` (up to ``max_batch_size``) and runs it as
  one padded batch. Each row leaves the batch, and its caller gets its completion, as soon as it finishes; between
  two decode steps the requests queued meanwhile are prefilled and join the running batch. While they are
  prefilled, the running batch keeps stepping between chunks of their prompts (``batch.CHUNK_TOKENS``), so a long
  prompt joining does not stall the rows that are decoding.
- Requests cannot take each other down: a request whose prefill fails (out of memory, a bad input) fails alone,
  the batch's other new requests are prefilled one by one; a failing decode step fails the rows still decoding,
  never a row that already finished; the worker goes on with the next requests. A caller waits at most
  ``request_timeout_s`` and gets ``EngineStoppedError`` at once if the worker thread is gone.
- Shutdown: ``close()`` stops the worker and joins it; a later request starts a new one. At interpreter exit an
  ``atexit`` hook (``_stop_workers``) closes every engine whose worker runs, after the forward pass it is in: a
  worker thread left running into the interpreter's finalization aborts the process (see ``_stop_workers``).
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
from typing import TYPE_CHECKING

from ragscale.process import release_openmp_threads

if TYPE_CHECKING:
    from ragscale.programs.lm.batch import Batcher, Job, Running

logger = logging.getLogger(__name__)

_RUNNING: set[Worker] = set()  # engines whose worker thread was started and not closed (under _RUNNING_LOCK)
_RUNNING_LOCK = threading.Lock()  # not the engines' shared lock, which is held while a model loads
_EXITING = threading.Event()  # set when the interpreter exits: no worker starts after it


class EngineStoppedError(RuntimeError):
    """A request the engine did not finish: it was closed without finishing (the interpreter exiting), or
    released (``TorchEngine.release``)."""


def _stop_workers() -> None:
    """Stop every engine's worker thread and wait for it, when the interpreter exits (an ``atexit`` hook).

    A daemon thread still alive when the interpreter finalizes is ended by ``pthread_exit`` as soon as it takes
    the GIL back. A worker inside a torch op takes it back in C++ code that cannot be unwound, and the process
    aborts ("terminate called without an active exception", exit 134) after the program itself succeeded. So the
    workers stop here, before finalization, after the forward pass they are in; what they had not finished fails.
    """
    _EXITING.set()
    with _RUNNING_LOCK:
        engines = list(_RUNNING)
    for engine in engines:
        engine.close(finish_running=False)


atexit.register(_stop_workers)


class Worker:
    """A queue of jobs and the thread that serves it through ``batcher``; see the module docstring.

    ``TorchEngine`` is one: it turns a request into a job, hands it to :meth:`_submit`, waits for it with
    :meth:`_wait` and turns its tokens into a response.
    """

    def __init__(
        self, batcher: Batcher, *, name: str, max_batch_size: int, wait_s: float, request_timeout_s: float | None
    ) -> None:
        self.batcher, self.name = batcher, name
        self.max_batch_size, self.wait_s, self.request_timeout_s = max_batch_size, wait_s, request_timeout_s
        self._active: Running | None = None  # the batch the worker is decoding
        self._start_lock = threading.Lock()
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._halt = False  # close(finish_running=False): stop after the current step, fail what is unfinished
        self._preparing = 0  # callers inside complete() that have not queued their request yet
        self._released = False  # the engine was released: no request is served any more

    def _refuse_if_released(self) -> None:
        if self._released:
            raise EngineStoppedError(f"{self.name}: this engine was released (release()); load the model again")

    def _submit(self, job: Job) -> None:
        with self._start_lock:
            self._refuse_if_released()  # again under the lock: release() may have run since complete() began
            if self._worker is None or not self._worker.is_alive():
                if _EXITING.is_set():
                    raise EngineStoppedError(f"{self.name}: the interpreter is exiting; no request is served now")
                # a daemon thread, so the interpreter's shutdown does not wait for an idle worker forever;
                # _stop_workers joins it before the interpreter finalizes
                self._worker = threading.Thread(target=self._run, name=f"TorchEngine-{self.name}", daemon=True)
                self._worker.start()
                with _RUNNING_LOCK:
                    _RUNNING.add(self)
            self._queue.put(job)

    def _wait(self, job: Job) -> None:
        """Wait for ``job``, at most ``request_timeout_s``; raise ``EngineStoppedError`` at once if the worker
        thread is gone with the job unfinished (it died, or the engine was closed), rather than wait forever."""
        deadline = None if self.request_timeout_s is None else time.monotonic() + self.request_timeout_s
        while not job.done.wait(timeout=0.2):
            worker = self._worker
            if (worker is None or not worker.is_alive()) and not job.done.is_set():
                raise EngineStoppedError(
                    f"{self.name}: the engine's worker thread is not running (it died or the engine was closed); "
                    "this request was not finished"
                )
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name}: no completion within {self.request_timeout_s:g} s (request_timeout_s); the "
                    f"worker is decoding {len(self._active.jobs) if self._active else 0} row(s)"
                )

    def close(self, *, finish_running: bool = True) -> None:
        """Stop the worker thread and wait for it; a later call starts a new one.

        The worker first finishes the batch it is decoding; with ``finish_running=False`` it stops after the
        forward pass it is in, and the requests it has not finished (running or queued) raise
        ``EngineStoppedError`` in their callers.
        """
        with self._start_lock:
            if self._worker is not None:
                self._halt = not finish_running
                self._queue.put(None)
                self._worker.join()
                self._worker = None
                self._halt = False
            if self.batcher is not None and self.batcher.prefixes is not None:
                self.batcher.prefixes.clear()
        with _RUNNING_LOCK:
            _RUNNING.discard(self)

    def _gather(self, first: Job | None, room: int) -> tuple[list[Job], bool]:
        """Up to ``room`` queued jobs and whether the engine was closed.

        An idle engine (``first`` given) waits ``wait_s`` for more to arrive (up to 10x that while callers are still
        tokenizing); a running batch takes only what is already queued, so its decoding never waits.
        """
        batch, start = ([first] if first is not None else []), time.monotonic()
        while len(batch) < room:
            try:
                job = self._queue.get(timeout=0.002) if first is not None else self._queue.get_nowait()
            except queue.Empty:
                waited = time.monotonic() - start
                if first is None or waited >= 10 * self.wait_s or (waited >= self.wait_s and not self._preparing):
                    break
                continue
            if job is None:
                return batch, True
            batch.append(job)
        return batch, False

    def _run(self) -> None:
        """Continuous batching: between two decode steps, queued requests join the running batch."""
        import torch

        with torch.inference_mode():
            self._serve()

    def _serve(self) -> None:
        self._active = None
        closing = False  # close() was called: finish what is running, take nothing new
        while True:
            if self._halt:
                self._abandon(self._active)
                return
            first = None
            if self._active is None:
                if self._queue.empty():
                    release_openmp_threads()  # an idle worker's helper threads slow every other torch thread
                first = None if closing else self._queue.get()
                if first is None:
                    return
                # a compiled step compiles here, before the first batch; buckets left out for want of memory, at
                # a later batch once there is room
                self.batcher.decoder.prepare()
            room = self.max_batch_size - (len(self._active.jobs) if self._active else 0)
            new, stop = self._gather(first, room) if not closing else ([], False)
            closing = closing or stop
            choices, generations = [j for j in new if j.options], [j for j in new if not j.options]
            try:
                self.batcher.choose(choices)
            except Exception as exc:
                self._fail(choices, exc)
            finally:
                self._finish(choices)
            if generations:
                batch = self._start_each(generations)
                if batch is not None:
                    try:
                        self._active = self.batcher.merge(self._active, batch)
                    except Exception as exc:  # the new rows fail; the batch that was decoding goes on
                        self._fail(batch.jobs, exc)
            self._step_active()

    def _step_active(self) -> None:
        """One decode step of the batch being decoded; if it fails, the rows still decoding get the error (the
        rows it finished keep their completions) and the worker goes on with the next requests."""
        if self._active is None:
            return
        try:
            self._active = self.batcher.step(self._active)
        except Exception as exc:
            jobs, self._active = self._active.jobs, None
            self._fail(jobs, exc)

    def _start_each(self, jobs: list[Job]) -> Running | None:
        """The new batch of ``jobs``, prefilled while the batch being decoded keeps stepping between chunks, with
        each request's failure its own: if the batch's prefill fails, its requests are prefilled one by one, and
        only those that fail alone get their error (over capacity, out of memory in a prefill). None if every one
        failed."""
        running = self._active is None  # a batch that will decode gets room for later joins

        def between() -> None:
            self._step_active()
            self.batcher.work["steps between prefill chunks"] += 1

        def start(batch: list[Job]) -> Running:
            return self.batcher.start(batch, running, between=between if self._active else None)

        try:
            return start(jobs)
        except Exception as exc:
            if len(jobs) == 1:
                self._fail(jobs, exc)
                return None
        batch = None
        for job in jobs:
            try:
                batch = self.batcher.merge(batch, start([job]))
            except Exception as exc:
                self._fail([job], exc)
        return batch

    def _abandon(self, running: Running | None) -> None:
        """Fail the running batch's requests and every queued one with ``EngineStoppedError``."""
        jobs = list(running.jobs) if running is not None else []
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                jobs.append(job)
        error = EngineStoppedError(f"{self.name}: the engine was closed before this request finished")
        for job in jobs:
            job.error = error
        self._finish(jobs)

    @staticmethod
    def _fail(jobs: list[Job], exc: BaseException) -> None:
        """Hand ``exc`` to the caller of every job of ``jobs`` not finished yet and release it; the caller re-raises
        it (a finished job's caller may already be reading its completion: it never gets another row's error)."""
        jobs = [job for job in jobs if not job.done.is_set()]
        logger.exception("generation failed for %d request(s)", len(jobs), exc_info=exc)
        for job in jobs:
            job.error = exc
            job.done.set()

    @staticmethod
    def _finish(jobs: list[Job]) -> None:
        for job in jobs:
            job.done.set()
