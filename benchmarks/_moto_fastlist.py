"""Make moto's ListObjectsV2 cost what S3's does: proportional to the page, not to the bucket.

moto 5 answers every ListObjectsV2 request by walking every key of the bucket,
building a set, sorting it by name and then skipping to ``StartAfter``: one
LIST of 1,000 keys in a bucket of 100,000 objects costs as much as listing all
100,000. Benchmarks of listing-heavy operations (gc, Strands' restore, opening
a session) would then measure moto's scan, and would depend on what else lives
in the bucket. ``install`` replaces the method, for unversioned buckets only,
with one that sorts the key names (in C) and bisects to the requested range;
the response is the same (``check`` compares both on a set of queries at
startup, and the benchmark refuses to run if they differ).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any

_LAST = "\U0010ffff"
_installed: dict[str, Any] = {}


def _fast(self: Any, bucket: Any, prefix: str | None, delimiter: str | None, continuation_token: str | None,
          start_after: str | None, max_keys: int) -> Any:  # fmt: skip
    from moto.s3.models import FakeBucket, FakeDeleteMarker

    if type(bucket) is not FakeBucket or bucket.is_versioned:
        return _installed["original"](self, bucket, prefix, delimiter, continuation_token, start_after, max_keys)
    prefix = prefix or ""
    names = sorted(dict.keys(bucket.keys))
    lo = bisect_left(names, prefix)
    hi = bisect_left(names, prefix + _LAST, lo)
    limit = (self._pagination_tokens.get(continuation_token) if continuation_token else start_after) or ""
    if limit:
        lo = max(lo, bisect_right(names, limit, lo, hi))
    out: list[Any] = []
    i = lo
    while i < hi and len(out) <= max_keys:
        name = names[i]
        rest = name[len(prefix) :]
        if delimiter and delimiter in rest:
            folder = prefix + rest.split(delimiter)[0] + delimiter
            if folder > limit:
                out.append(folder)
            i = bisect_left(names, folder + _LAST, i, hi)
            continue
        key = bucket.keys[name]
        if not isinstance(key, FakeDeleteMarker):
            out.append(key)
        i += 1
    return self._truncate_result(out, max_keys)


def install() -> None:
    from moto.s3.models import S3Backend

    if "original" not in _installed:
        _installed["original"] = S3Backend.list_objects_v2
        S3Backend.list_objects_v2 = _fast  # type: ignore[method-assign]


def check(backend: Any, bucket_name: str) -> None:
    """Raise AssertionError unless the fast listing answers a set of queries exactly as moto's own."""
    keys = [
        "a", "a/", "a/b", "a/b/c", "a/b/d", "a/c", "a/c/x", "ab", "b/1", "b/2", "b/2/z", "b/3",
        *(f"s/{i:03d}/{j:020d}" for i in range(12) for j in range(5)),
        *(f"s/{i:03d}/manifest" for i in range(12)),
    ]  # fmt: skip
    for key in keys:
        backend.put_object(bucket_name, key, b"x")
    bucket = backend.get_bucket(bucket_name)
    queries = [
        (p, d, sa, mk)
        for p in ("", "a", "a/", "b/", "s/", "s/003/", "zz")
        for d in ("", "/")
        for sa in ("", "a/b", "a/b/", "a/c" + _LAST, "s/004/" + _LAST, "s/005/00000000000000000002")
        for mk in (0, 1, 3, 1000)
    ]

    def names(result: Any) -> Any:
        found, truncated, token = result
        return [k if isinstance(k, str) else k.name for k in found], truncated, token is not None

    for p, d, sa, mk in queries:
        mine = names(_fast(backend, bucket, p, d, None, sa, mk))
        theirs = names(_installed["original"](backend, bucket, p, d, None, sa, mk))
        assert mine == theirs, (p, d, sa, mk, mine, theirs)
    # a continuation token from one page must resume where moto's would
    first = _fast(backend, bucket, "s/", "", None, None, 7)
    assert first[1] and first[2]
    mine = names(_fast(backend, bucket, "s/", "", first[2], None, 7))
    theirs = names(_installed["original"](backend, bucket, "s/", "", first[2], None, 7))
    assert mine == theirs, (mine, theirs)
