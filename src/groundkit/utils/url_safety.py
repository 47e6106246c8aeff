"""What a URL must pass before groundkit sends a single byte to it.

Checked in order, before any request: the scheme is http or https; there is
no userinfo; no query parameter looks like a credential (so one is never
fetched, logged or stored); the host is a valid name or a numeric address in
any spelling ``inet_aton`` accepts. Then the host is resolved and *every*
address must pass the ``AddressPolicy``; the fetch connects to the address
that was checked, so a second DNS answer is never trusted.

The default policy admits public addresses only. Nothing here reads the
environment: loosening the policy takes code (``AddressPolicy.allowing``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

import httpx

from groundkit.errors import IngestionError

__all__ = [
    "CREDENTIAL_PARAMETERS",
    "PUBLIC_ONLY",
    "AddressPolicy",
    "CheckedURL",
    "IPAddress",
    "Resolver",
    "check_url",
    "looks_like_url",
    "parse_numeric_host",
    "resolve_checked",
    "system_resolver",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

# Query parameter names refused outright (compared lower-case, '-' as '_').
CREDENTIAL_PARAMETERS = frozenset(
    {
        "access_key",
        "access_token",
        "api_key",
        "apikey",
        "auth",
        "auth_token",
        "authorization",
        "bearer",
        "client_secret",
        "code_verifier",
        "credential",
        "credentials",
        "id_token",
        "jwt",
        "key",
        "passwd",
        "password",
        "private_key",
        "pwd",
        "refresh_token",
        "secret",
        "secret_key",
        "session",
        "session_token",
        "sessionid",
        "sig",
        "signature",
        "token",
        "x_amz_credential",
        "x_amz_security_token",
        "x_amz_signature",
        "x_goog_credential",
        "x_goog_signature",
    }
)
# Any name containing one of these is refused too (``github_token``, ``db_password``).
_CREDENTIAL_FRAGMENTS = ("token", "secret", "password", "passwd", "apikey", "api_key", "signature")

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_HOST_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
_NUMERIC_PART = re.compile(r"^(?:0[xX][0-9A-Fa-f]*|[0-9]+)$")

_SHARED = ipaddress.ip_network("100.64.0.0/10")
_BENCHMARK = ipaddress.ip_network("198.18.0.0/15")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
_SITE_LOCAL = ipaddress.ip_network("fec0::/10")


def looks_like_url(text: str) -> bool:
    """True for anything with a ``scheme://`` prefix; such a string is never a path."""
    return bool(_SCHEME.match(text))


def _refuse(url: str, reason: str) -> IngestionError:
    return IngestionError(f"refused URL {url}: {reason}")


def _is_credential(name: str) -> bool:
    key = unquote(name).strip().lower().replace("-", "_")
    return key in CREDENTIAL_PARAMETERS or any(f in key for f in _CREDENTIAL_FRAGMENTS)


def _parse_ipv4_part(part: str) -> int:
    if part[:2].lower() == "0x":
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        return int(part, 8)  # ValueError for 8 or 9: not an address
    return int(part, 10)


def parse_numeric_host(host: str) -> IPAddress | None:
    """The address a numeric host denotes, in any spelling; None for a name.

    IPv4 follows ``inet_aton`` and the WHATWG URL standard: one to four
    dot-separated parts, each decimal, octal (leading 0) or hex (0x), the last
    filling the remaining bytes, so ``2130706433``, ``0x7f.1`` and ``0177.0.0.1``
    are all 127.0.0.1. A host whose last label is numeric is an address or
    invalid (``ValueError``), never a name to resolve.
    """
    text = host.strip("[]")
    if ":" in text:
        return ipaddress.IPv6Address(unquote(text))
    parts = text.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()  # one trailing dot is allowed, as in DNS
    if not parts or not _NUMERIC_PART.match(parts[-1]):
        return None
    if len(parts) > 4 or not all(_NUMERIC_PART.match(p) for p in parts):
        raise ValueError(f"{host!r} is neither a host name nor an IPv4 address")
    numbers = [_parse_ipv4_part(p) for p in parts]
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        raise ValueError(f"{host!r} is out of range for an IPv4 address")
    value = numbers[-1]
    for index, number in enumerate(numbers[:-1]):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def _category(address: IPAddress) -> str | None:
    """Why ``address`` is not a public unicast address, or None when it is."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return "an IPv4-mapped IPv6 address"
        if address.is_unspecified:
            return "the unspecified address"
        if address.is_loopback:
            return "a loopback address"
        if address in _IPV4_COMPATIBLE:
            return "an IPv4-compatible IPv6 address"
        embedded: ipaddress.IPv4Address | None = address.sixtofour
        if embedded is None and address.teredo is not None:
            embedded = address.teredo[1]
        nat64 = any(address in net for net in _NAT64)
        if embedded is None and nat64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            inner = _category(embedded)
            if inner is not None:
                return f"an IPv6 address embedding {embedded} ({inner})"
            if nat64:
                return None  # DNS64 answers for a public IPv4 host on IPv6-only networks
        if address.is_link_local:
            return "a link-local address"
        if address in _UNIQUE_LOCAL:
            return "a unique-local address"
        if address in _SITE_LOCAL:
            return "a site-local address"
    else:
        if address.is_unspecified or address in ipaddress.ip_network("0.0.0.0/8"):
            return "the unspecified ('this network') range"
        if address.is_loopback:
            return "a loopback address"
        if address.is_link_local:
            return "a link-local address (cloud metadata lives here)"
        if address in _SHARED:
            return "a shared (carrier-grade NAT) address"
        if address in _BENCHMARK:
            return "a benchmarking address"
        if address == ipaddress.IPv4Address("255.255.255.255"):
            return "the broadcast address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_reserved:
        return "a reserved address"
    if address.is_private:
        return "a private address"
    if not address.is_global:
        return "not a globally routable address"
    return None


@dataclass(frozen=True)
class AddressPolicy:
    """Which resolved addresses a fetch may connect to.

    The default admits public unicast addresses only. ``allowed`` networks are
    admitted besides, e.g. ``AddressPolicy.allowing("127.0.0.0/8")`` for a test
    server or ``"10.0.0.0/8"`` for an intranet.
    """

    allowed: tuple[IPNetwork, ...] = field(default=())

    @classmethod
    def allowing(cls, *networks: str) -> AddressPolicy:
        return cls(tuple(ipaddress.ip_network(n) for n in networks))

    def refusal(self, address: IPAddress) -> str | None:
        """Why ``address`` is refused under this policy, or None when it is allowed."""
        if any(address.version == net.version and address in net for net in self.allowed):
            return None
        return _category(address)


PUBLIC_ONLY = AddressPolicy()


@dataclass(frozen=True)
class CheckedURL:
    """A URL that passed every check that needs no network."""

    url: httpx.URL  # normalised, without fragment
    source: str  # what the document is keyed by
    host: str  # as it goes in the Host header and SNI
    port: int
    address: IPAddress | None  # set when the host is numeric

    @property
    def host_header(self) -> str:
        return self.url.netloc.decode("ascii")


def check_url(url: str) -> CheckedURL:
    """Check everything about ``url`` that needs no network; ``IngestionError`` if refused."""
    if not isinstance(url, str) or not url.strip():
        raise IngestionError("a URL must be a non-empty string")
    text = url.strip()
    scheme = text.split(":", 1)[0].lower()
    if scheme not in ("http", "https"):
        # Named without the rest: other schemes may carry anything.
        raise IngestionError(f"refused URL: scheme {scheme!r} is not http or https")
    try:
        parsed = httpx.URL(text)
    except (httpx.InvalidURL, ValueError) as exc:
        raise IngestionError(f"refused URL: not a valid URL ({exc})") from None
    if parsed.userinfo:
        raise IngestionError("refused URL: it carries a user name or password (user@host)")
    # Split on ';' as well as '&': servers that take ';' as a separator read
    # ``?a=1;token=x`` as carrying a token, though httpx reads one parameter ``a``.
    query = parsed.query.decode("ascii")
    pairs = (part.partition("=")[0] for part in re.split("[&;]", query))
    names = sorted({unquote(name.replace("+", " ")) for name in pairs if _is_credential(name)})
    if names:
        raise IngestionError(
            f"refused URL: query parameter(s) {', '.join(map(repr, names))} look like "
            "credentials; groundkit never fetches, logs or stores such a URL"
        )
    shown = str(parsed.copy_with(fragment=None))
    # The ASCII form: an internationalised name as its IDNA A-label
    # (``xn--bcher-kva.example``), what DNS, the Host header and SNI carry.
    host = parsed.raw_host.decode("ascii")
    if not host:
        raise _refuse(shown, "no host")
    if parsed.port is not None and not 0 < parsed.port < 65536:
        # Caught here, not by the socket: a port out of range fails there
        # with an OverflowError, and port 0 is no service.
        raise _refuse(shown, f"port {parsed.port} is not between 1 and 65535")
    try:
        address = parse_numeric_host(host)
    except ValueError as exc:
        raise _refuse(shown, str(exc)) from None
    if address is None:
        name = host[:-1] if host.endswith(".") else host
        if len(name) > 253 or not all(_HOST_LABEL.match(label) for label in name.split(".")):
            raise _refuse(shown, f"{host!r} is not a valid host name")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return CheckedURL(
        url=parsed.copy_with(fragment=None), source=shown, host=host, port=port, address=address
    )


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for ``host``, in its order."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return [str(info[4][0]) for info in infos]


async def resolve_checked(
    checked: CheckedURL, policy: AddressPolicy = PUBLIC_ONLY, resolver: Resolver | None = None
) -> IPAddress:
    """The address to connect to, after checking every address the host has.

    One refused address refuses the URL: a name that resolves to a public and a
    private address could be answered either way on connect.
    """
    if checked.address is not None:
        addresses: list[IPAddress] = [checked.address]
    else:
        resolve = resolver or system_resolver
        try:
            answers = await resolve(checked.host.rstrip("."), checked.port)
        except (OSError, UnicodeError) as exc:
            raise IngestionError(f"cannot resolve {checked.host!r}: {exc}") from None
        addresses = []
        for answer in answers:
            try:
                addresses.append(ipaddress.ip_address(answer.split("%", 1)[0]))
            except ValueError:
                raise _refuse(checked.source, f"resolver answered {answer!r}") from None
        if not addresses:
            raise IngestionError(f"cannot resolve {checked.host!r}: no addresses")
    for address in addresses:
        reason = policy.refusal(address)
        if reason is not None:
            raise _refuse(checked.source, f"{checked.host!r} is {address}, {reason}")
    return addresses[0]
