"""The network cause read from an installer's output (`milabench.envs.netcause`).

The outputs below were printed by uv 0.13.9 and pip 26.3 against the loopback servers of
tests/netindex.py (a wrong authority, a 401, a closed port, a closed proxy, an index
refusing HEAD) and, for DNS, an ``.invalid`` host. tests/envs/test_networks.py runs the
same cases end to end; these keep each installer's wording pinned in one place.
"""

from __future__ import annotations

import pytest

from milabench.envs.netcause import classify

UV_TLS = """\
Using Python 3.11.7 environment at: v
error: Failed to fetch: https://127.0.0.1:18443/simple/mbtiny/
  cause: error sending request for url (https://127.0.0.1:18443/simple/mbtiny/)
  cause: client error (Connect)
  cause: invalid peer certificate: UnknownIssuer

hint: Consider enabling use of system TLS certificates with the `--system-certs` command-line flag
"""
UV_TLS_TERMINAL = """\
  × Failed to fetch: https://127.0.0.1:18443/simple/mbtiny/
  ├─▶ error sending request for url (https://127.0.0.1:18443/simple/mbtiny/)
  ├─▶ client error (Connect)
  ╰─▶ invalid peer certificate: UnknownIssuer
"""
UV_401 = """\
error: No solution found when resolving dependencies
  cause: Because mbtiny was not found in the package registry and you require mbtiny, we can conclude that your requirements are unsatisfiable.

hint: An index URL (https://u:bad@127.0.0.1:18444/simple) could not be queried due to a lack of valid authentication credentials (401 Unauthorized)
"""
UV_NOT_FOUND = """\
error: No solution found when resolving dependencies
  cause: Because mbtiny was not found in the package registry and you require mbtiny, we can conclude that your requirements are unsatisfiable.
"""
UV_REFUSED = """\
error: Failed to fetch: https://127.0.0.1:18499/simple/mbtiny/
  cause: error sending request for url (https://127.0.0.1:18499/simple/mbtiny/)
  cause: client error (Connect)
  cause: tcp connect error
  cause: Connection refused (os error 111)
"""
UV_PROXY = """\
error: Failed to fetch: https://127.0.0.1:18443/simple/mbtiny/
  cause: error sending request for url (https://127.0.0.1:18443/simple/mbtiny/)
  cause: client error (Connect)
  cause: tunnel error: failed to create underlying connection
  cause: tcp connect error
  cause: Connection refused (os error 111)
"""
UV_DNS = """\
error: Failed to fetch: https://nonexistent.invalid/simple/mbtiny/
  cause: error sending request for url (https://nonexistent.invalid/simple/mbtiny/)
  cause: client error (Connect)
  cause: dns error
  cause: error resolving DNS
  cause: failed to lookup address information: Name or service not known
"""
UV_501 = """\
error: Request failed after 3 retries in 8.9s
  cause: Failed to fetch: https://127.0.0.1:18443/files/mbtiny-1.0-py3-none-any.whl
  cause: HTTP status server error (501 Unsupported method ('HEAD')) for url (https://127.0.0.1:18443/files/mbtiny-1.0-py3-none-any.whl)
"""
UV_501_WRAPPED = """\
error: Failed to fetch: https://127.0.0.1:35529/files/mbtiny-1.0-py3-none-any.whl
  cause: HTTP status server error (501 Unsupported method ('HEAD')) for url
         (https://127.0.0.1:35529/files/mbtiny-1.0-py3-none-any.whl)
"""
PIP_TLS = """\
Looking in indexes: https://127.0.0.1:18443/simple
Could not fetch URL https://127.0.0.1:18443/simple/mbtiny/: There was a problem confirming the ssl certificate: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer certificate (_ssl.c:1006) - skipping
ERROR: Could not find a version that satisfies the requirement mbtiny (from versions: none)
ERROR: No matching distribution found for mbtiny
"""
PIP_401 = """\
Looking in indexes: https://u:****@127.0.0.1:18444/simple
WARNING: 401 Error, Credentials not correct for https://127.0.0.1:18444/simple/mbtiny/
ERROR: Could not find a version that satisfies the requirement mbtiny (from versions: none)
ERROR: No matching distribution found for mbtiny
"""
PIP_REFUSED = """\
Looking in indexes: https://127.0.0.1:18499/simple
WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError("HTTPSConnection(host='127.0.0.1', port=18499): Failed to establish a new connection: [Errno 111] Connection refused")': /simple/mbtiny/
ERROR: Could not find a version that satisfies the requirement mbtiny (from versions: none)
ERROR: No matching distribution found for mbtiny
"""
PIP_NO_CAUSE = """\
Looking in indexes: https://127.0.0.1:18499/simple
ERROR: Could not find a version that satisfies the requirement mbtiny (from versions: none)
ERROR: No matching distribution found for mbtiny
"""


@pytest.mark.parametrize(
    "output, kind, text",
    [
        (UV_TLS, "tls", "TLS: unknown issuer at https://127.0.0.1:18443/simple/mbtiny/"),
        (UV_TLS_TERMINAL, "tls", "TLS: unknown issuer at https://127.0.0.1:18443/simple/mbtiny/"),
        (UV_401, "http", "HTTP 401 Unauthorized at https://<redacted>@127.0.0.1:18444/simple"),
        (UV_REFUSED, "connect", "connection refused at https://127.0.0.1:18499/simple/mbtiny/"),
        (UV_PROXY, "proxy", "proxy refused the connection at https://127.0.0.1:18443/simple/mbtiny/"),
        (UV_DNS, "connect", "DNS: cannot resolve nonexistent.invalid at https://nonexistent.invalid/simple/mbtiny/"),
        (UV_501, "http", "HTTP 501 Unsupported method ('HEAD') at https://127.0.0.1:18443/files/mbtiny-1.0-py3-none-any.whl"),
        (UV_501_WRAPPED, "http", "HTTP 501 Unsupported method ('HEAD') at https://127.0.0.1:35529/files/mbtiny-1.0-py3-none-any.whl"),
        (PIP_TLS, "tls", "TLS: unknown issuer at https://127.0.0.1:18443/simple/mbtiny/"),
        (PIP_401, "http", "HTTP 401 Unauthorized at https://127.0.0.1:18444/simple/mbtiny/"),
        (PIP_REFUSED, "connect", "connection refused at 127.0.0.1:18499"),
    ],
)  # fmt: skip
def test_each_installers_words_give_one_cause(output, kind, text):
    cause = classify(output.splitlines())
    assert cause is not None
    assert (cause.kind, str(cause)) == (kind, text)


@pytest.mark.parametrize("output", [UV_NOT_FOUND, PIP_NO_CAUSE, "", "ERROR: boom"])
def test_no_network_cause_is_none(output):
    """A package nobody publishes is not a network failure: no fallback, uv's line stays."""
    assert classify(output.splitlines()) is None


def test_pip_proxy_and_tunnel_words():
    refused = (
        "WARNING: Retrying (Retry(total=0)) after connection broken by 'ProxyError('Unable to "
        "connect to proxy', NewConnectionError(\"HTTPConnection(host='127.0.0.1', port=3128): "
        "Failed to establish a new connection: [Errno 111] Connection refused\"))': /simple/x/"
    )
    assert classify([refused]).label == "proxy refused the connection"
    tunnel = (
        "WARNING: Retrying after connection broken by 'ProxyError('Unable to connect to proxy', "
        "OSError('Tunnel connection failed: 403 Forbidden'))': /simple/x/"
    )
    assert classify([tunnel]).label == "proxy refused the tunnel (403 Forbidden)"


def test_other_tls_and_http_words():
    assert classify(["  cause: invalid peer certificate: Expired"]).label == (
        "TLS: certificate expired"
    )
    assert classify(["  cause: received fatal alert: CertificateRequired"]).label == (
        "TLS: the server requires a client certificate"
    )
    line = "ERROR: HTTP error 404 while getting https://idx.example/files/x-1.0-py3-none-any.whl"
    cause = classify([line])
    assert str(cause) == "HTTP 404 Not Found at https://idx.example/files/x-1.0-py3-none-any.whl"
    expired = (
        "Could not fetch URL https://idx.example/simple/x/: There was a problem confirming the "
        "ssl certificate: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
        "certificate has expired (_ssl.c:1006) - skipping"
    )
    assert classify([expired]).label == "TLS: certificate expired"
