"""What the request-metrics middleware adds to each request, alone: python -m bench.metrics_cost

Times terminals.metrics.RequestMetrics around a view that answers at once, against the bare view, on a request
for one terminal (the hot path of a poller), best of five runs."""

from __future__ import annotations

import os
import timeit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def main() -> None:
    import django

    django.setup()
    from django.http import HttpResponse
    from django.test import RequestFactory
    from django.urls import resolve

    from terminals.metrics import RequestMetrics

    path = "/api/terminals/6b1c1d7e-0000-4000-8000-000000000000"
    request = RequestFactory().get(path)
    request.resolver_match = resolve(path)
    response = HttpResponse()

    def bare(_request):
        return response

    wrapped = RequestMetrics(bare)
    number = 200_000
    alone = min(timeit.repeat(lambda: bare(request), number=number, repeat=5)) / number
    measured = min(timeit.repeat(lambda: wrapped(request), number=number, repeat=5)) / number
    print(f"request metrics add {1e6 * (measured - alone):.1f} us per request")


if __name__ == "__main__":
    main()
