"""ORM queries compiled once and run again with another key: for the hottest lookups, where compiling the query
cost more than running it (bench/ANALYSIS.md). The SQL is still Django's, for whichever database is configured."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

from django.db import connections
from django.db.models import QuerySet

_SENTINEL = uuid.UUID("5e9f0c4e-0000-4000-8000-000000000000")


class PreparedLookup:
    """build(key) is a values_list() queryset filtered on a primary key; rows(key) runs its SQL, compiled once,
    and converts the values as the queryset would have (datetimes, booleans)."""

    def __init__(self, build: Callable[[uuid.UUID], QuerySet]) -> None:
        self._build = build
        self._compiled: dict[str, tuple[str, list, int, Callable]] = {}
        self._lock = threading.Lock()

    def rows(self, key: uuid.UUID, using: str = "default") -> list[tuple]:
        connection = connections[using]
        compiled = self._compiled.get(using) or self._compile(using)
        sql, params, index, convert = compiled
        params = list(params)
        params[index] = self._field.get_db_prep_value(key, connection, prepared=False)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        return [tuple(row) for row in convert(rows)] if rows else rows

    def _compile(self, using: str) -> tuple[str, list, int, Callable]:
        with self._lock:
            queryset = self._build(_SENTINEL)
            self._field = queryset.model._meta.pk
            compiler = queryset.query.get_compiler(using=using)
            sql, params = compiler.as_sql()
            converters = compiler.get_converters([column[0] for column in compiler.select[:compiler.col_count]])
            marker = self._field.get_db_prep_value(_SENTINEL, connections[using], prepared=False)
            places = [number for number, param in enumerate(params) if param == marker]
            assert len(places) == 1, f"the key must appear once among the parameters: {params!r}"
            convert = (lambda rows: compiler.apply_converters(rows, converters)) if converters else (lambda rows: rows)
            self._compiled[using] = compiled = (sql, list(params), places[0], convert)
            return compiled
