"""The report model: Markdown and HTML rendering, escaping, images, commands."""

from __future__ import annotations

import re

from dpukit.report import Report, Section


def make_report() -> Report:
    r = Report("Results <&> \"quoted\"")
    r.intro = Section("").paragraph("Intro with `code <x>` and <b>no html</b>.").blocks
    s = r.section("core.example: a & b")
    s.paragraph("Plain text.")
    s.table(["name", "value"], [["alpha", "1,234"], ["<script>alert(1)</script> | pipe", 5.5]],
            caption="A <table>")
    s.image("plots/core.example-rate.png", "rate plot", "Rate vs size.")
    s.add_command(["/x/build/bin/dpukit-core", "ring-bench", "--note", "two words", "--json", "a&b.json"])
    s.add_runs([{"command_line": ["dpukit-core", "channel-bench", "--mode", "thread"]}])
    r.section("second")
    return r


def test_markdown_has_table_image_and_commands():
    md = make_report().to_markdown()
    assert "| name | value |" in md
    assert "|:---|---:|" in md  # text left, numbers right
    assert "| alpha | 1,234 |" in md
    assert "![rate plot](<plots/core.example-rate.png>)" in md
    assert "```sh" in md
    assert "/x/build/bin/dpukit-core ring-bench --note 'two words' --json 'a&b.json'" in md
    assert "dpukit-core channel-bench --mode thread" in md


def test_markdown_escapes_table_cells_and_html():
    md = make_report().to_markdown()
    assert "&lt;script&gt;alert(1)&lt;/script&gt; \\| pipe" in md
    assert "<script>" not in md
    assert "<b>" not in md
    assert "`code <x>`" in md  # code spans are left literal


def test_html_has_tables_images_and_escapes():
    html = make_report().to_html()
    assert html.startswith("<!DOCTYPE html>")
    assert "<style>" in html
    assert html.count("<table>") == 1  # the caption "<table>" is escaped
    assert "<th class=\"left\">name</th>" in html
    assert "<td class=\"right\">1,234</td>" in html
    assert "<caption>A &lt;table&gt;</caption>" in html
    assert '<img src="plots/core.example-rate.png" alt="rate plot">' in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; | pipe" in html
    assert "<script>" not in html
    assert "<title>Results &lt;&amp;&gt; &quot;quoted&quot;</title>" in html
    assert "<code>code &lt;x&gt;</code>" in html
    assert "&lt;b&gt;no html&lt;/b&gt;" in html
    assert "--note &#x27;two words&#x27; --json &#x27;a&amp;b.json&#x27;" in html


def test_html_section_anchors_and_contents():
    html = make_report().to_html()
    assert '<section id="core-example-a-b">' in html
    assert '<a href="#core-example-a-b">core.example: a &amp; b</a>' in html


def test_tables_must_be_rectangular():
    s = Section("t")
    try:
        s.table(["a", "b"], [["only one"]])
    except ValueError:
        pass
    else:
        raise AssertionError("ragged table accepted")


def test_write_creates_both_files(tmp_path):
    md, html = make_report().write(tmp_path)
    assert md == tmp_path / "report.md" and md.read_text().startswith("# Results")
    assert html == tmp_path / "report.html"
    assert re.search(r"<h2>core\.example: a &amp; b</h2>", html.read_text())


def test_a_command_run_in_every_round_is_listed_once():
    from dpukit.report import Section

    sec = Section("title")
    for _ in range(3):
        sec.add_command(["wrk", "-c16", "http://127.0.0.1:1/"])
    sec.add_command(["wrk", "-c4", "http://127.0.0.1:1/"])
    assert sec.commands == [["wrk", "-c16", "http://127.0.0.1:1/"], ["wrk", "-c4", "http://127.0.0.1:1/"]]
