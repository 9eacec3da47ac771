"""report.html's template is compiled once per process and kept in Jinja's per-user cache of
compiled templates: a new process loads it instead of compiling it (about 0.1 CPU-s), and a
cache that cannot be read or written only costs the compile."""

from __future__ import annotations

import jinja2
import pytest

from pytest_gemmperf.report import html


@pytest.fixture
def compiles(monkeypatch):
    """Counts the template compiles of every Jinja environment."""
    count = []
    original = jinja2.Environment.compile

    def counted(self, *args, **kwargs):
        count.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(jinja2.Environment, "compile", counted)
    return count


@pytest.fixture
def fresh_env():
    html._env.cache_clear()
    yield
    html._env.cache_clear()


def test_a_process_compiles_the_page_template_once(compiles, fresh_env):
    html.prepare_template()
    first = len(compiles)
    html.prepare_template()
    html._env().get_template(html.TEMPLATE)
    assert len(compiles) == first <= 1


def test_a_new_environment_loads_the_compiled_template_from_the_cache(compiles, fresh_env):
    html.prepare_template()  # compiled, or already in the cache
    html._env.cache_clear()  # as a new process
    compiles.clear()
    template = html._env().get_template(html.TEMPLATE)
    assert compiles == [] and template.render is not None


def test_a_cache_that_cannot_be_used_costs_only_the_compile(tmp_path, compiles):
    not_a_dir = tmp_path / "cache"
    not_a_dir.write_text("a file where the cache directory would be")
    env = jinja2.Environment(loader=jinja2.PackageLoader("pytest_gemmperf.report", "templates"),
                             bytecode_cache=html._TemplateCache(str(not_a_dir)), autoescape=True)
    assert env.get_template("history.html.j2") is not None and compiles == [1]
    assert not_a_dir.read_text().startswith("a file")
