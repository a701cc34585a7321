"""The service serves its own static files (the admin's styles, Swagger UI) in both deployments, with no CDN and
no other web server, and / leads somewhere useful."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

import requests

ADMIN_CSS = "/static/admin/css/base.css"


def test_the_admins_styles_are_served(server):
    response = requests.get(f"{server.url}{ADMIN_CSS}", timeout=30)
    assert response.status_code == 200, response.text[:200]
    assert response.headers["Content-Type"].startswith("text/css")
    assert "body" in response.text
    assert requests.head(f"{server.url}{ADMIN_CSS}", timeout=30).status_code == 200


def test_an_unknown_static_file_is_404(server):
    response = requests.get(f"{server.url}/static/admin/css/no-such-file.css", timeout=30)
    assert response.status_code == 404


def test_the_api_docs_load_only_from_the_service(server):
    """Every script, style and image the docs page uses is the service's own and answers 200: the page works
    without internet, and its Swagger UI is the pinned one that ships with the service."""
    page = requests.get(f"{server.url}/api/docs/", timeout=30)
    assert page.status_code == 200, page.text
    references = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    references += re.findall(r'url:\s*"([^"]+)"', page.text)
    assert references, page.text
    for reference in references:
        address = urljoin(f"{server.url}/api/docs/", reference)
        assert urlsplit(address).netloc == urlsplit(server.url).netloc, f"{reference} is loaded from elsewhere"
        assert requests.get(address, timeout=30).status_code == 200, reference
    assert any("swagger-ui" in reference and reference.endswith(".js") for reference in references), references
    assert "cdn.jsdelivr.net" not in page.text and "unpkg.com" not in page.text


def test_the_root_is_the_dashboard_behind_its_login(server):
    response = requests.get(f"{server.url}/", timeout=30, allow_redirects=False)
    assert response.status_code == 302
    assert response.headers["Location"] == "/login/?next=/"
    login = requests.get(f"{server.url}/login/", timeout=30)
    assert login.status_code == 200 and 'name="password"' in login.text


def test_the_admin_login_page_is_styled_and_named(server):
    page = requests.get(f"{server.url}/admin/login/", timeout=30)
    assert page.status_code == 200
    assert "Terminals administration" in page.text
    stylesheets = re.findall(r'<link rel="stylesheet" href="([^"]+)"', page.text)
    assert stylesheets
    for sheet in stylesheets:
        assert requests.get(urljoin(server.url, sheet), timeout=30).status_code == 200, sheet
