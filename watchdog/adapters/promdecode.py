"""I/O: one Prometheus ``/api/v1/query`` answer (JSON) -> its rows; decides nothing.

Decoding is typed (``msgspec``), in one pass over the body for the answers the watchdog gets: the envelope
(``status``, ``warnings``, ``data.resultType``) and every row straight into a small frozen struct of the wanted
labels' values -- the other labels are skipped unread, every wanted value is checked to be a string, every time
to be a finite number, every value a number (Prometheus writes it as a string, ``"NaN"`` and ``"-Inf"`` included; a
bare JSON number is read too). About 5 ms
for the 1.5 MiB answer of 10,000 engine series, where ``json.loads`` plus a check per row took ~30 ms
(docs/scaling.md). Anything else -- a value msgspec does not read as a number (``"+Inf"``), another result
type, an error, malformed JSON -- takes the careful path: the envelope first, then the rows with their values as
sent, each through ``float()``; so an answer is refused with the same one-line reason either way.
"""

from __future__ import annotations

import functools
import sys
from typing import Annotated, Any

import msgspec

from watchdog.core.promql import Series

__all__ = ["PrometheusError", "decode", "decode_values", "error_text"]

_BAD_ROW = 'Prometheus answer has a row that is not {metric: {label: "value", ...}, value: [time, "value"]}'
_LIST: Any = list  # list[<a struct type made at run time>]: a type mypy cannot check
_TIME = Annotated[float, msgspec.Meta(ge=-sys.float_info.max, le=sys.float_info.max)]  # finite, checked in C


class PrometheusError(Exception):
    """A query failed; ``str()`` is one line saying why."""

    def __init__(self, detail: str) -> None:
        super().__init__(" ".join(str(detail).split())[:400])


class _Data(msgspec.Struct):
    resultType: Any = None  # Prometheus' field names
    result: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)  # decoded once known to be a vector


class _Answer(msgspec.Struct):
    status: Any = None
    data: _Data | None = None
    warnings: Any = None
    errorType: Any = None
    error: Any = None


_ENVELOPE = msgspec.json.Decoder(_Answer)


def _row(metric: Any, value: Any) -> Any:
    return msgspec.defstruct("Row", [("metric", metric), ("value", tuple[_TIME, value])], gc=False)


def _answer(row: Any) -> msgspec.json.Decoder[Any]:
    """One pass: a successful vector answer of ``row``s (a wrong shape is a ValidationError: the careful path)."""
    data = msgspec.defstruct("Data", [("resultType", str), ("result", _LIST[row])], gc=False)
    answer = msgspec.defstruct("Answer", [("status", Any, None), ("data", data | None, None), ("warnings", Any, None),
                                          ("errorType", Any, None), ("error", Any, None)], gc=False)
    return msgspec.json.Decoder(answer, strict=False)  # not strict: a number written as a string is read


@functools.lru_cache(maxsize=32)
def _decoders(labels: tuple[str, ...] | None) -> tuple[msgspec.json.Decoder[Any], msgspec.json.Decoder[list[Any]], Any]:
    """(the one-pass answer decoder with float values, the careful rows decoder with values as sent, the row
    struct of the first) for rows keeping ``labels`` (unique) as a frozen struct of their values in that order;
    None: every label, a dict."""
    if labels is None:
        metric: Any = dict[str, str]
    else:
        fields = [(f"l{i}", str | None, None) for i in range(len(labels))]
        metric = msgspec.defstruct("Labels", fields, rename={f"l{i}": n for i, n in enumerate(labels)},
                                   frozen=True, gc=False)
    row = _row(metric, float)
    return _answer(row), msgspec.json.Decoder(_LIST[_row(metric, float | str)]), row


def decode(body: bytes) -> list[tuple[dict[str, str], float, float]]:
    """The rows of one ``/api/v1/query`` answer as (every label, time, value); raises :class:`PrometheusError`
    as :func:`decode_values` does."""
    return [(row.metric, *row.value) for row in _decode(body, None)]


def decode_values(body: bytes, labels: tuple[str, ...]) -> list[Series]:
    """The rows of one ``/api/v1/query`` answer as (the values of ``labels``, value): None where a row has no such
    label, the other labels never decoded. Raises :class:`PrometheusError` on anything else than a successful
    ``vector`` answer without warnings (the watchdog's queries all aggregate: never a matrix), or a row that is
    not ``{metric: {label: "value", ...}, value: [time, "value"]}``."""
    names = tuple(dict.fromkeys(labels))
    values_of = msgspec.structs.astuple
    if names == labels:  # one pass over the rows: the hot path of a 10,000-series cycle
        return [(values_of(row.metric), row.value[1]) for row in _decode(body, names)]
    order = [names.index(label) for label in labels]
    return [(tuple(values[i] for i in order), row.value[1])
            for row in _decode(body, names) for values in (values_of(row.metric),)]


def _decode(body: bytes, labels: tuple[str, ...] | None) -> list[Any]:
    """The answer's rows, each with ``metric`` (the labels' struct, or every label) and ``value`` (time, value)."""
    one_pass, rows_decoder, row = _decoders(labels)
    try:
        doc = one_pass.decode(body)
    except msgspec.ValidationError:  # another shape, "+Inf", an error answer with odd fields: the careful path
        return _careful(body, rows_decoder, row)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise PrometheusError(_not_json(exc)) from None
    _check(doc.status, doc.warnings, doc.errorType, doc.error)
    if doc.data is None:
        raise PrometheusError("Prometheus answer has no data.result list")
    _vector(doc.data.resultType)
    return doc.data.result  # type: ignore[no-any-return]


def _careful(body: bytes, rows_decoder: msgspec.json.Decoder[list[Any]], row: Any) -> list[Any]:
    try:
        doc = _ENVELOPE.decode(body)
    except msgspec.ValidationError:  # a subclass of DecodeError: valid JSON of another shape
        raise PrometheusError("Prometheus answer is not a JSON object") from None
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise PrometheusError(_not_json(exc)) from None
    _check(doc.status, doc.warnings, doc.errorType, doc.error)
    data = doc.data
    if data is None or not data.result:
        raise PrometheusError("Prometheus answer has no data.result list")
    _vector(data.resultType)
    try:
        return [row(sent.metric, (sent.value[0], float(sent.value[1]))) for sent in rows_decoder.decode(data.result)]
    except msgspec.ValidationError as exc:
        raise PrometheusError(f"{_BAD_ROW}: {str(exc)[:200]}") from None
    except (msgspec.DecodeError, RecursionError, ValueError):
        raise PrometheusError(_BAD_ROW) from None


def _vector(result_type: Any) -> None:
    if result_type is None:
        raise PrometheusError("Prometheus answer has no data.resultType")
    if result_type != "vector":
        raise PrometheusError(f"Prometheus answered a {result_type!r}, not a vector")


def _not_json(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError) or "utf-8" in str(exc).lower():  # msgspec < 0.23 / >= 0.23
        return "Prometheus answer is not valid UTF-8"
    return "Prometheus answer is not JSON (or nested too deep)"


def _check(status: Any, warnings: Any, error_type: Any, error: Any) -> None:
    if status is None:
        raise PrometheusError("Prometheus answer has no status")
    if status != "success":
        raise PrometheusError(f"Prometheus answered status {status!r}: {str(error_type or '')[:50]}: "
                              f"{str(error or '')[:200]}")
    if warnings:
        raise PrometheusError(f"Prometheus answered with warnings (a partial answer): {str(warnings)[:200]}")


def error_text(body: bytes) -> str:
    """``errorType: error`` of an error answer (an HTTP 4xx/5xx body), or ``""``."""
    try:
        doc = _ENVELOPE.decode(body)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return ""
    if isinstance(doc.error, str):
        return f"{doc.errorType or ''}: {doc.error[:200]}"
    return ""
