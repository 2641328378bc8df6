"""Network settings a user controls, and evstore's retry policy (no boto3 here: cheap to import).

Where a setting comes from, first match wins: a keyword argument of
``open_store`` (or a global option of the command), evstore's environment
variable, botocore's (``AWS_MAX_ATTEMPTS``, ``AWS_RETRY_MODE``), the default.

=========================  ==========================  =======  =====================================
setting                    environment                 default  meaning
=========================  ==========================  =======  =====================================
``connect_timeout``        ``EVSTORE_CONNECT_TIMEOUT``  3 s      to open a connection
``read_timeout``           ``EVSTORE_READ_TIMEOUT``     6 s      for the server to answer (each read)
``max_attempts``           ``EVSTORE_MAX_ATTEMPTS``,    3        attempts per request, the first one
                           ``AWS_MAX_ATTEMPTS``                  included
``retry_deadline``         ``EVSTORE_RETRY_DEADLINE``   20 s     no retry starts later than this after
                                                                 the first attempt
``retry_mode``             ``AWS_RETRY_MODE``           standard botocore's mode for its single attempt
                                                                 (``adaptive``: client-side rate limits)
=========================  ==========================  =======  =====================================

With the defaults, a server that accepts connections and never answers fails
a request after 3 x 6 s plus two short backoffs, about 19 s.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping

import msgspec

from .._errors import InvalidInputError

DEFAULT_CONNECT_TIMEOUT = 3.0
DEFAULT_READ_TIMEOUT = 6.0
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_RETRY_DEADLINE = 20.0
#: Backoff before the second attempt (doubling per attempt, capped): 0.1 s, 0.2 s, 0.4 s ...; x5 when throttled.
DEFAULT_RETRY_BACKOFF = 0.1
BACKOFF_CAP = 5.0
THROTTLED_FACTOR = 5.0
RETRY_MODES = ("legacy", "standard", "adaptive")

#: A one-line note about a request being retried (the command prints it on a terminal).
RetryNote = Callable[[str], None]


class NetworkSettings(msgspec.Struct, frozen=True):
    """Timeouts and retry bounds of the requests an S3 store makes (local and memory stores make none)."""

    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    retry_deadline: float = DEFAULT_RETRY_DEADLINE
    #: botocore's retry mode, None for botocore's own resolution (its config file), else "standard".
    retry_mode: str | None = None

    @classmethod
    def resolve(
        cls,
        environ: Mapping[str, str],
        *,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        max_attempts: int | None = None,
        retry_deadline: float | None = None,
    ) -> NetworkSettings:
        """Arguments first, then the environment, then the defaults; a bad value is ``InvalidInputError``."""
        mode = environ.get("AWS_RETRY_MODE", "").strip().lower() or None
        if mode is not None and mode not in RETRY_MODES:
            raise InvalidInputError(f"AWS_RETRY_MODE must be one of {', '.join(RETRY_MODES)}, not {mode[:20]!r}")
        return cls(
            connect_timeout=_seconds("connect_timeout", connect_timeout, environ),
            read_timeout=_seconds("read_timeout", read_timeout, environ),
            max_attempts=_attempts(max_attempts, environ),
            retry_deadline=_seconds("retry_deadline", retry_deadline, environ),
            retry_mode=mode,
        )


#: Each duration setting: its environment variable and default.
_DURATIONS = {
    "connect_timeout": ("EVSTORE_CONNECT_TIMEOUT", DEFAULT_CONNECT_TIMEOUT),
    "read_timeout": ("EVSTORE_READ_TIMEOUT", DEFAULT_READ_TIMEOUT),
    "retry_deadline": ("EVSTORE_RETRY_DEADLINE", DEFAULT_RETRY_DEADLINE),
}


def _seconds(name: str, given: float | None, environ: Mapping[str, str]) -> float:
    variable, default = _DURATIONS[name]
    if given is not None:
        source, value = name, given
    elif environ.get(variable, "").strip():
        text = environ[variable].strip()
        source = variable
        try:
            value = float(text.removesuffix("s"))
        except ValueError:
            raise InvalidInputError(f"{variable} must be a number of seconds, not {text[:20]!r}") from None
    else:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or not 0 < value <= 3600:
        raise InvalidInputError(f"{source} must be a number of seconds above 0 and at most 3600, not {value!r}")
    return float(value)


def _attempts(given: int | None, environ: Mapping[str, str]) -> int:
    if given is not None:
        source, value = "max_attempts", given
    else:
        variable = next((v for v in ("EVSTORE_MAX_ATTEMPTS", "AWS_MAX_ATTEMPTS") if environ.get(v, "").strip()), None)
        if variable is None:
            return DEFAULT_MAX_ATTEMPTS
        text = environ[variable].strip()
        source = variable
        if not text.isdigit():
            raise InvalidInputError(f"{variable} must be a whole number of attempts, not {text[:20]!r}")
        value = int(text)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise InvalidInputError(f"{source} must be a whole number from 1 to 100 (the first attempt included), not {value!r}")
    return value


def backoff_delay(attempt: int, *, base: float, throttled: bool = False, rng: random.Random | None = None) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1 for the first).

    Exponential (``base`` x 2^(attempt-1), x5 when the server said to slow down,
    capped at 5 s), with "equal jitter": half of it fixed, half uniformly random,
    so writers that failed together do not retry in lockstep.
    """
    ceiling = min(BACKOFF_CAP, base * (THROTTLED_FACTOR if throttled else 1.0) * 2.0 ** (attempt - 1))
    draw = rng.uniform(0, ceiling / 2) if rng is not None else random.uniform(0, ceiling / 2)
    return ceiling / 2 + draw
