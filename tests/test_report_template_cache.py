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


def _page_env(cache_dir, **options) -> jinja2.Environment:
    page = "<p>\n  {% if x %}\n    {{ x }}\n  {% endif %}\n</p>\n"
    return jinja2.Environment(loader=jinja2.DictLoader({"page.j2": page}),
                              bytecode_cache=html._TemplateCache(str(cache_dir)), **{"autoescape": True, **options})


@pytest.mark.parametrize("options", [dict(trim_blocks=True, lstrip_blocks=True), dict(autoescape=False),
                                     dict(finalize=str.upper)])
def test_code_compiled_under_other_options_is_not_served(tmp_path, compiles, options):
    """The same template text compiled under other compile-time options (an upgrade that changes
    the page's environment) is compiled anew, never loaded from the cache as it was."""
    before = _page_env(tmp_path).get_template("page.j2").render(x="<b>")
    after_env = _page_env(tmp_path, **options)
    fresh = jinja2.Environment(loader=after_env.loader, **{"autoescape": True, **options})
    compiles.clear()
    page = after_env.get_template("page.j2").render(x="<b>")
    assert compiles == [1]
    assert page == fresh.get_template("page.j2").render(x="<b>") != before


def test_code_compiled_by_another_version_is_not_served(tmp_path, compiles, monkeypatch):
    """An upgrade of Jinja or of this package compiles the templates once more: the cache never
    serves code another version's compiler wrote."""
    _page_env(tmp_path).get_template("page.j2")
    compiles.clear()
    _page_env(tmp_path).get_template("page.j2")
    assert compiles == []  # same versions, same options: loaded
    monkeypatch.setattr(html, "__version__", "99.0")
    _page_env(tmp_path).get_template("page.j2")
    assert compiles == [1]
    monkeypatch.setattr(jinja2, "__version__", "99.0")
    _page_env(tmp_path).get_template("page.j2")
    assert compiles == [1, 1]


def test_the_cache_directory_is_the_users_own():
    """The default cache directory is private to the user (Jinja's check: owned by this user,
    mode 0700, not a link): no other user can plant compiled code in it."""
    import os
    import stat

    cache = html._template_cache()
    if cache is None:
        pytest.skip("no private temporary directory here: the page is compiled without a cache")
    st = os.lstat(cache.directory)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700
