"""The URL gate, offline: every refusal happens before a request, most before any DNS."""

from __future__ import annotations

import ipaddress

import pytest

from groundkit import IngestionError
from groundkit.utils.url_safety import (
    PUBLIC_ONLY,
    AddressPolicy,
    check_url,
    looks_like_url,
    parse_numeric_host,
    resolve_checked,
)
from tests.sources import stub_resolver

# Names a stub resolver answers; nothing here touches real DNS.
DNS = {
    "localhost": ["127.0.0.1", "::1"],
    "metadata.google.internal": ["169.254.169.254"],
    "intranet.corp": ["10.1.2.3"],
    "rebind.example": ["93.184.216.34", "127.0.0.1"],  # one good answer is not enough
    "v6only.example": ["fd12:3456::1"],
    "mapped.example": ["::ffff:10.0.0.1"],
    "public.example": ["93.184.216.34", "2606:2800:220:1::1"],
}

# Hosts the default policy must refuse. Numeric spellings must be decoded
# without asking the resolver; the names go through the stub.
SSRF_HOSTS = [
    # loopback, every spelling
    "127.0.0.1",
    "127.1",
    "127.0.1",
    "127.255.255.254",
    "2130706433",
    "0x7f000001",
    "0x7F.0.0.1",
    "0x7f.1",
    "0x7f.0x0.0x0.0x1",
    "127.0.0.1.",
    "017700000001",
    "0x000000007f000001",
    "[::1]",
    "[0:0:0:0:0:0:0:1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[0:0:0:0:0:ffff:127.0.0.1]",
    "[::127.0.0.1]",
    "[2002:7f00:1::]",
    "[64:ff9b::7f00:1]",
    "localhost",
    "LOCALHOST.",
    # unspecified
    "0",
    "0.0.0.0",
    "0x0",
    "[::]",
    # link-local, cloud metadata
    "169.254.169.254",
    "2852039166",
    "0xa9fea9fe",
    "0xa9.0xfe.0xa9.0xfe",
    "169.254.43518",
    "[fe80::1]",
    "[fe80::1%25eth0]",
    "[::ffff:169.254.169.254]",
    "metadata.google.internal",
    # private, unique-local, shared, site-local
    "10.0.0.1",
    "0xa000001",
    "167772161",
    "10.1",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.0.1",
    "3232235521",
    "[fd00::1]",
    "[fc00::1]",
    "[fec0::1]",
    "100.64.0.1",
    "100.127.255.254",
    "intranet.corp",
    "v6only.example",
    "mapped.example",
    "rebind.example",
    # multicast, reserved, broadcast, documentation, benchmarking
    "224.0.0.1",
    "239.255.255.250",
    "[ff02::1]",
    "240.0.0.1",
    "255.255.255.255",
    "4294967295",
    "192.0.2.1",
    "198.51.100.7",
    "203.0.113.9",
    "198.18.0.1",
    "[2001:db8::1]",
    "[2001:0:4136:e378:8000:63bf:3fff:fdd2]",  # Teredo, client 192.0.2.45
]

# Not addresses at all: refused while parsing.
MALFORMED_HOSTS = [
    "1.2.3.4.5",
    "256.0.0.1",
    "08.0.0.1",
    "0x100000000",
    "4294967296",
    "%31%32%37.0.0.1",
    "127.0.0.1:80:80",
    "exa mple.com",
    "[::ffff:999.0.0.1]",
]


@pytest.mark.parametrize("host", SSRF_HOSTS)
async def test_default_policy_refuses(host: str) -> None:
    calls: list[str] = []
    checked = check_url(f"http://{host}/latest/meta-data/")
    with pytest.raises(IngestionError, match="refused URL"):
        await resolve_checked(checked, PUBLIC_ONLY, stub_resolver(DNS, calls))
    if checked.address is not None:
        assert calls == []  # numeric: decided without DNS


def test_table_is_big_and_distinct() -> None:
    assert len(set(SSRF_HOSTS)) == len(SSRF_HOSTS) >= 40


@pytest.mark.parametrize("host", MALFORMED_HOSTS)
def test_malformed_hosts_refused_before_dns(host: str) -> None:
    with pytest.raises(IngestionError, match="refused URL"):
        check_url(f"http://{host}/")


@pytest.mark.parametrize(
    ("spelling", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0177.0.0.01", "127.0.0.1"),
        ("10.1", "10.0.0.1"),
        ("169.254.43518", "169.254.169.254"),
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("8.8.8.8.", "8.8.8.8"),
        ("[::ffff:7f00:1]", "::ffff:127.0.0.1"),
        ("example.com", None),
        ("1e100.net", None),
    ],
)
def test_numeric_spellings(spelling: str, address: str | None) -> None:
    parsed = parse_numeric_host(spelling)
    assert parsed == (None if address is None else ipaddress.ip_address(address))


async def test_public_addresses_pass_and_the_first_is_pinned() -> None:
    calls: list[str] = []
    checked = check_url("https://public.example/page?q=solar#part")
    address = await resolve_checked(checked, PUBLIC_ONLY, stub_resolver(DNS, calls))
    assert address == ipaddress.ip_address("93.184.216.34")
    assert calls == ["public.example"]
    assert checked.source == "https://public.example/page?q=solar"  # no fragment
    for literal in ("8.8.8.8", "[2606:4700:4700::1111]", "134744072"):
        checked = check_url(f"http://{literal}/")
        assert await resolve_checked(checked, PUBLIC_ONLY, stub_resolver({}, calls)) is not None


async def test_policy_allowing_loopback_is_explicit() -> None:
    policy = AddressPolicy.allowing("127.0.0.0/8")
    calls: list[str] = []
    assert await resolve_checked(check_url("http://127.0.0.1:8080/"), policy) == (
        ipaddress.ip_address("127.0.0.1")
    )
    # Only what was allowed: other private ranges and IPv6 loopback stay refused.
    for host in ("10.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "169.254.169.254"):
        with pytest.raises(IngestionError):
            await resolve_checked(check_url(f"http://{host}/"), policy, stub_resolver({}, calls))
    # localhost also answers ::1, which this policy does not allow: every address counts.
    with pytest.raises(IngestionError, match="::1"):
        await resolve_checked(check_url("http://localhost/"), policy, stub_resolver(DNS, calls))


async def test_resolver_failures() -> None:
    with pytest.raises(IngestionError, match="cannot resolve"):
        await resolve_checked(check_url("http://nowhere.example/"), resolver=stub_resolver({}, []))
    with pytest.raises(IngestionError, match="no addresses"):
        await resolve_checked(
            check_url("http://empty.example/"), resolver=stub_resolver({"empty.example": []}, [])
        )


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/file",
        "file:///etc/passwd",
        "gopher://example.com/",
        "javascript:alert(1)",
        "http://user:pass@example.com/",
        "http://user@example.com/",
        "https://example.com/?api_key=abc",
        "https://example.com/?APIKEY=abc",
        "https://example.com/?key=abc",
        "https://example.com/?Token=abc",
        "https://example.com/?access_token=abc",
        "https://example.com/?auth=abc",
        "https://example.com/?secret=abc",
        "https://example.com/?password=abc",
        "https://example.com/?signature=abc",
        "https://example.com/?sig=abc",
        "https://bucket.s3.amazonaws.com/o?X-Amz-Signature=abc",
        "https://bucket.s3.amazonaws.com/o?x-amz-credential=abc",
        "https://example.com/?q=1&github_token=abc",
        "https://example.com/?%61pi_key=abc",
        "https://example.com/?q=1;token=abc",  # ';' separates parameters on some servers
        "http:///no-host",
        "",
    ],
)
def test_refused_on_its_face(url: str) -> None:
    with pytest.raises(IngestionError, match=r"refused URL|non-empty") as info:
        check_url(url)
    # A refused credential never appears in the message.
    assert "abc" not in str(info.value) and "user:pass" not in str(info.value)


def test_ordinary_query_is_kept() -> None:
    checked = check_url("https://example.com/search?q=monkey&page=2")
    assert checked.source == "https://example.com/search?q=monkey&page=2"
    assert checked.host_header == "example.com"
    assert check_url("http://Example.COM:8080/a").host_header == "example.com:8080"


@pytest.mark.parametrize(
    "url", ["http://example.com:0/", "http://8.8.8.8:65536/", "http://x.io:99999/"]
)
def test_ports_out_of_range_refused_on_their_face(url: str) -> None:
    # Left to the socket, 65536 fails as an OverflowError inside httpx's task group.
    with pytest.raises(IngestionError, match="is not between 1 and 65535"):
        check_url(url)


@pytest.mark.parametrize(
    "url", ["http://bücher.example/a", "http://BÜCHER.example/a", "http://xn--bcher-kva.example/a"]
)
async def test_internationalised_names_go_out_as_their_ascii_form(url: str) -> None:
    checked = check_url(url)
    assert checked.host == "xn--bcher-kva.example"
    assert checked.host_header == "xn--bcher-kva.example"
    assert checked.source == "http://xn--bcher-kva.example/a"
    calls: list[str] = []
    resolver = stub_resolver({"xn--bcher-kva.example": ["93.184.216.34"]}, calls)
    assert str(await resolve_checked(checked, PUBLIC_ONLY, resolver)) == "93.184.216.34"
    assert calls == ["xn--bcher-kva.example"]


def test_looks_like_url() -> None:
    assert looks_like_url("https://example.com")
    assert looks_like_url("ftp://example.com")
    assert not looks_like_url("docs/https:/example")
    assert not looks_like_url("./notes")
