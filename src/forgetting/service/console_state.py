"""What the console keeps between requests: sessions, each model's verify job and last
rebuild, and the helpers its pages share (templates, times, uploaded ids).

Split from :mod:`.console` (the pages) so that each stays readable; the reasons for the
sessions' design are in :mod:`.console`'s docstring.
"""

from __future__ import annotations

import csv
import io
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

from fastapi.templating import Jinja2Templates

from ..store.errors import StoreCorrupt
from ..store.receipt_log import ReceiptFilter
from .model import ServableModel
from .recovery import one_line
from .signin import SignInForms, SignInLimiter

#: How long a signed-in session lasts without use, in seconds.
SESSION_IDLE = 8 * 3600
#: The most signed-in sessions held at once (the one used longest ago is dropped first; only
#: a correct token opens one).
MAX_SESSIONS = 512


@dataclass
class Session:
    """One browser's session: its CSRF token, whether it signed in, when it was last used."""

    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    signed_in: bool = False
    seen: float = field(default_factory=time.monotonic)
    operator: str | None = None
    """The name of the operator whose token signed in: the changes made here are theirs."""


class Sessions:
    """Signed-in sessions by random id, bounded in number and idle time (an anonymous visitor
    has none: :mod:`.signin`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        with self._lock:
            session = self._by_id.get(sid)
            if session is None:
                return None
            if time.monotonic() - session.seen > SESSION_IDLE:
                del self._by_id[sid]
                return None
            session.seen = time.monotonic()
            return session

    def new(self, operator: str | None = None) -> tuple[str, Session]:
        """Open a signed-in session for ``operator``."""
        sid = secrets.token_urlsafe(32)
        session = Session(signed_in=True, operator=operator)
        with self._lock:
            if len(self._by_id) >= MAX_SESSIONS:
                oldest = min(self._by_id, key=lambda k: self._by_id[k].seen)
                del self._by_id[oldest]
            self._by_id[sid] = session
        return sid, session

    def drop(self, sid: str | None) -> None:
        with self._lock:
            self._by_id.pop(sid or "", None)


@dataclass
class ConsoleState:
    """What the console keeps, on ``app.state.console``: the signed-in sessions, the
    sign-in forms and the limit on failed sign-ins."""

    sessions: Sessions
    forms: SignInForms
    limiter: SignInLimiter


class VerifyJob:
    """The store's verify, run in a background thread, one at a time; keeps the last result."""

    def __init__(self, model: ServableModel):
        self._model = model
        self._lock = threading.Lock()
        self.running = False
        self.started: str | None = None
        self.result: dict | None = None
        self.error: str | None = None

    def start(self) -> bool:
        """Start a verify unless one runs; whether one was started."""
        verify = getattr(self._model, "verify", None)
        if not callable(verify):
            self.error = "this model has no verify"
            return False
        with self._lock:
            if self.running:
                return False
            self.running, self.error = True, None
            self.started = _now()
        threading.Thread(target=self._run, args=(verify,), daemon=True).start()
        return True

    def _run(self, verify) -> None:
        try:
            result, error = verify(), None
        except Exception as err:  # noqa: BLE001 - shown to the operator, one line
            result, error = None, one_line(err, 300)
        with self._lock:
            self.result, self.error, self.running = result, error, False


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


#: The cookie remembering how the console shows times: ``utc`` (the default) or ``local``.
ZONE_COOKIE = "forgetting_times"


def shown_time(timestamp: object, zone: str) -> str:
    """A receipt's UTC timestamp as the operator chose to see it: as stored (UTC), or in the
    server's local time zone with its offset (``local``). Anything unreadable as it is."""
    if zone != "local" or not isinstance(timestamp, str):
        return "" if timestamp is None else str(timestamp)
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return timestamp
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone().isoformat(timespec="seconds")


def _templates() -> Jinja2Templates:
    folder = Path(str(resources.files(__package__).joinpath("templates")))
    templates = Jinja2Templates(directory=folder)
    # every template autoescaped, whatever its name: ids and CSV cells are text
    templates.env.autoescape = True
    return templates


def ids_from_csv(data: bytes) -> list[str]:
    """The ids of an uploaded CSV: the first column of each non-empty row; a first row
    whose first cell is ``id`` (any case) is a header."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError("the CSV file is not UTF-8 text") from None
    ids = [row[0].strip() for row in csv.reader(io.StringIO(text)) if row and row[0].strip()]
    if ids and ids[0].lower() == "id":
        ids = ids[1:]
    return ids


class LastRebuild:
    """The time of the latest receipt that started a rebuild (the store records no other
    rebuild time), read incrementally: each call reads only the receipts appended since."""

    def __init__(self, model: ServableModel):
        self._model = model
        self._lock = threading.Lock()
        self._cursor = 0
        self._latest: str | None = None

    def __call__(self) -> str | None:
        keep = ReceiptFilter(operation="forget")
        with self._lock:
            try:
                while True:
                    items, after = self._model.receipts(keep, after=self._cursor, limit=1000)
                    for receipt in items:
                        self._cursor = max(self._cursor, int(receipt["seq"]))
                        if receipt.get("rebuild_started"):
                            self._latest = receipt.get("timestamp")
                    if after is None:
                        break
                    self._cursor = max(self._cursor, after)
            except (StoreCorrupt, RecursionError):
                pass  # the log page says so; health still answers
            return self._latest
