"""Front matter as static-site generators and note apps really write it, ingested end to end.

Each page below is shaped like what its tool produces (Jekyll posts, Hugo pages in YAML
and TOML, MkDocs Material pages, Obsidian notes) plus a few pages with values that trip
up ordinary YAML readers. The whole folder goes through ``Collection.ingest``: every page
must be indexed, found by its own words and verified, with the fields a field can hold
stored as written and each one it cannot hold named once in the report's warnings.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from groundkit import Collection, RetrievalError
from groundkit.contracts import FieldValue
from groundkit.testing.conformance.helpers import document_by_source
from tests.support import write_tree


@dataclass(frozen=True)
class Page:
    path: str
    text: str
    # What the stored document's fields must equal, exactly.
    fields: dict[str, FieldValue]
    # Words only this page's body holds: a search for them finds this page first.
    phrase: str
    # Keys the ingest passes over, each named in one warning for this file.
    skipped: tuple[str, ...] = ()


JEKYLL_POST = Page(
    "_posts/2024-03-01-welcome-to-jekyll.md",
    """---
layout: post
title:  "Welcome to Jekyll!"
date:   2024-03-01 10:15:00 +0100
categories: [jekyll, update]
tags: release notes
permalink: /blog/:year/:month/:title/
published: false
author: Ann Example
---
You'll find this post in your `_posts` directory. Go ahead and edit it and re-build the
site to see your changes. To add new posts, add a file named `YYYY-MM-DD-title.md`.

Jekyll also offers powerful support for code snippets through its Liquid highlighter.
""",
    {
        "author": "Ann Example",
        "categories": ["jekyll", "update"],
        "date": "2024-03-01 10:15:00 +0100",
        "layout": "post",
        "permalink": "/blog/:year/:month/:title/",
        "published": False,
        "tags": "release notes",
        "title": "Welcome to Jekyll!",
    },
    "liquid highlighter snippets",
)

# Saved by an editor on Windows: every line ends in CRLF.
JEKYLL_CRLF = Page(
    "_posts/2023-11-20-windows-line-endings.md",
    "---\r\n"
    "layout: post\r\n"
    "title: Notes from the build server\r\n"
    "date: 2023-11-20T08:00:00-05:00\r\n"
    "categories:\r\n"
    "  - ops\r\n"
    "  - ci\r\n"
    "excerpt_separator: <!--more-->\r\n"
    "---\r\n"
    "The nightly runner rotates its cache volumes every Sunday.\r\n"
    "<!--more-->\r\n"
    "Longer notes follow the separator.\r\n",
    {
        "categories": ["ops", "ci"],
        "date": "2023-11-20T08:00:00-05:00",
        "excerpt_separator": "<!--more-->",
        "layout": "post",
        "title": "Notes from the build server",
    },
    "nightly runner rotates cache volumes",
)

HUGO_YAML = Page(
    "content/posts/deploying-with-hugo.md",
    """---
title: "Deploying with Hugo"
date: 2024-02-12T09:30:00-05:00
lastmod: 2024-02-14
draft: true
weight: 20
aliases:
  - /old/deploy/
  - /posts/deploy-hugo/
tags: ["hugo", "deploy"]
series: ["Static sites"]
params:
  author: Ann
  toc: true
---
Hugo writes the rendered site into the public folder; upload that folder to any static host.

---

A thematic break in the body is text, not a second block of front matter.
""",
    {
        "aliases": ["/old/deploy/", "/posts/deploy-hugo/"],
        "date": "2024-02-12T09:30:00-05:00",
        "draft": True,
        "lastmod": "2024-02-14",
        "series": ["Static sites"],
        "tags": ["hugo", "deploy"],
        "title": "Deploying with Hugo",
        "weight": 20,
    },
    "rendered site public folder upload",
    ("params",),
)

HUGO_TOML = Page(
    "content/posts/shortcodes.md",
    """+++
title = 'Shortcodes in Hugo'
date = 2024-01-05T08:00:00Z
lastmod = 2024-01-06
publishDate = 2024-01-05T08:00:00+01:00
draft = false
weight = 5
aliases = ['/old/shortcodes/']
tags = ['hugo', 'templates']
categories = []
[params]
  math = true
  [params.author]
    name = 'Bo'
[menus]
  [menus.main]
    weight = 10
+++
A shortcode is a template snippet called from Markdown with double curly braces.
""",
    {
        "aliases": ["/old/shortcodes/"],
        "categories": [],
        "date": "2024-01-05T08:00:00+00:00",
        "draft": False,
        "lastmod": "2024-01-06",
        "publishDate": "2024-01-05T08:00:00+01:00",
        "tags": ["hugo", "templates"],
        "title": "Shortcodes in Hugo",
        "weight": 5,
    },
    "shortcode template snippet curly braces",
    ("menus", "params"),
)

HUGO_SECTION = Page(
    "content/docs/_index.md",
    """+++
title = "Documentation"
linkTitle = "Docs"
weight = 1
[[cascade]]
  type = "docs"
+++
Reference pages for every configuration setting live in this section.
""",
    {"linkTitle": "Docs", "title": "Documentation", "weight": 1},
    "reference pages configuration setting section",
    ("cascade",),
)

MKDOCS_PAGE = Page(
    "docs/getting-started.md",
    """---
title: Getting started
description: Install the theme and build a first site in a few minutes.
icon: material/rocket-launch
status: new
hide:
  - navigation
  - toc
tags:
  - Setup
  - Getting started
search:
  exclude: true
---

# Getting started

Install the package with pip, then run the development server to preview pages live.
""",
    {
        "description": "Install the theme and build a first site in a few minutes.",
        "hide": ["navigation", "toc"],
        "icon": "material/rocket-launch",
        "status": "new",
        "tags": ["Setup", "Getting started"],
        "title": "Getting started",
    },
    "development server preview pages live",
    ("search",),
)

MKDOCS_HOME = Page(
    "docs/index.md",
    """---
template: home.html
hide: [navigation, toc, footer]
social:
  cards: false
---
Welcome to the handbook: everything the support desk answers more than twice.
""",
    {"hide": ["navigation", "toc", "footer"], "template": "home.html"},
    "handbook support desk answers twice",
    ("social",),
)

OBSIDIAN_NOTE = Page(
    "vault/Tea index.md",
    """---
aliases:
  - Tea MOC
  - "Tea: overview"
tags:
  - tea
  - tea/green
  - "#brewing"
cssclasses:
  - wide-page
created: 2024-03-01T09:12
updated: 2024-03-04T18:40
related: "[[Other note]]"
links:
  - "[[Oolong]]"
  - "[[Green tea#Steeping|steeping]]"
rating: 4
publish: true
---
Oolong sits between green and black tea: partly oxidised, rolled and often roasted.

See [[Oolong]] and [[Green tea#Steeping|steeping]].
""",
    {
        "aliases": ["Tea MOC", "Tea: overview"],
        "created": "2024-03-01T09:12",
        "cssclasses": ["wide-page"],
        "links": ["[[Oolong]]", "[[Green tea#Steeping|steeping]]"],
        "publish": True,
        "rating": 4,
        "related": "[[Other note]]",
        "tags": ["tea", "tea/green", "#brewing"],
        "updated": "2024-03-04T18:40",
    },
    "partly oxidised rolled roasted",
)

# Obsidian's own properties editor: empty properties are written with no value.
OBSIDIAN_EMPTY = Page(
    "vault/Daily/2024-03-05.md",
    """---
tags:
aliases: []
mood: ""
date: 2024-03-05
---
Walked to the market before the rain; bought kombucha starter and two kinds of miso.
""",
    {"aliases": [], "date": "2024-03-05", "mood": ""},
    "kombucha starter miso market",
)

LONG_LIST = [f"item-{n:03d}" for n in range(300)]

ODD_PAGE = Page(
    "misc/odd-values.md",
    """---
title: Values that look like something else
version: 1.10
answer: no
enabled: on
code: 007
hex: 0x1F
zip: 01234
ratio: 0.5
count: 12
big: 123456789012345678901234567890
versions: [1.10, 1.9, 2.0]
summary:
empty_text: ''
page title: keys with spaces are not field names
deep:
  level1:
    level2:
      level3:
        value: 1
matrix:
  - [1, 2]
  - [3, 4]
long: [@LONG@]
---
Odd values must not cost the body its place in the index: sesquipedalian quokkas.
""".replace("@LONG@", ", ".join(LONG_LIST)),
    {
        "answer": "no",
        "big": "123456789012345678901234567890",
        "code": "007",
        "count": 12,
        "empty_text": "",
        "enabled": "on",
        "hex": "0x1F",
        "long": list(LONG_LIST),
        "ratio": 0.5,
        "title": "Values that look like something else",
        "version": "1.10",
        "versions": ["1.10", "1.9", "2.0"],
        "zip": "01234",
    },
    "sesquipedalian quokkas",
    ("deep", "matrix", "page title"),
)

CORPUS = (
    JEKYLL_POST,
    JEKYLL_CRLF,
    HUGO_YAML,
    HUGO_TOML,
    HUGO_SECTION,
    MKDOCS_PAGE,
    MKDOCS_HOME,
    OBSIDIAN_NOTE,
    OBSIDIAN_EMPTY,
    ODD_PAGE,
)

_NAMED = re.compile(r"\b(?:field|key) '([^']+)'")
_LINE = re.compile(r"front matter line (\d+): ")


async def test_generator_pages_are_indexed_searchable_and_keep_their_fields(
    tmp_path: Path,
) -> None:
    base = tmp_path / "site"
    write_tree(base, {page.path: page.text for page in CORPUS})
    async with Collection.open(tmp_path / "index", "site", base_dir=base) as col:
        report = await col.ingest(base)
        assert report.failed == []
        assert report.added == sorted(page.path for page in CORPUS)

        by_path = {page.path: page for page in CORPUS}
        # One warning line per field passed over, naming the file and that field.
        named: Counter[tuple[str, str]] = Counter()
        for warning in report.warnings:
            assert "\n" not in warning.reason, warning
            assert warning.reason.startswith("front matter "), warning
            keys = _NAMED.findall(warning.reason)
            assert len(keys) == 1, warning
            named[(warning.source, keys[0])] += 1
            # A YAML note's line number is the key's own line in the file.
            line = _LINE.match(warning.reason)
            if line is not None:
                text = by_path[warning.source].text.splitlines()[int(line[1]) - 1]
                assert text.startswith(keys[0] + ":"), (warning, text)
        expected = Counter((page.path, key) for page in CORPUS for key in page.skipped)
        assert named == expected

        for page in CORPUS:
            record = await document_by_source(col.store, page.path)
            assert record is not None, page.path
            assert dict(record.fields) == page.fields, page.path

            # The body is indexed: the page's own words find it, and it verifies.
            response = await col.search(page.phrase, top_k=3)
            top = response.results[0]
            assert top.source == page.path, (page.phrase, [r.source for r in response.results])
            assert top.fields == page.fields
            assert page.text[top.start_offset : top.end_offset] == top.content
            check = await col.verify(top)
            assert check.ok, (page.path, check.detail)
            fetched = await col.fetch_chunk(top.chunk_id)
            assert fetched.verification == "verified", (page.path, fetched.detail)

        whole = await col.verify_all()
        assert whole.ok and whole.problems == []
        assert whole.verified > 0


async def test_typed_values_filter_as_written(tmp_path: Path) -> None:
    """A value kept as text is matched as that text, not as the number YAML would make."""
    base = tmp_path / "site"
    write_tree(base, {page.path: page.text for page in CORPUS})
    async with Collection.open(tmp_path / "index", "site", base_dir=base) as col:
        await col.ingest(base)
        hits = await col.search("quokkas", filters={"version": "1.10"})
        assert [r.source for r in hits.results] == [ODD_PAGE.path]
        # The number YAML would have made is refused: no document holds a number there.
        with pytest.raises(RetrievalError, match="a number value for a field holding str"):
            await col.search("quokkas", filters={"version": 1.1})
        zips = await col.search("quokkas", filters={"zip": "01234", "answer": "no"})
        assert [r.source for r in zips.results] == [ODD_PAGE.path]
        drafts = await col.search("hugo", filters={"draft": True})
        assert {r.source for r in drafts.results} == {HUGO_YAML.path}
