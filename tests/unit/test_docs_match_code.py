"""The pages say what the code does: adapters listed, defaults stated, sections that exist."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import idempotent_lambda.adapters
from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig
from idempotent_lambda._record_format import NATIVE, POWERTOOLS
from idempotent_lambda.adapters._batch import DEFAULT_MAX_CONCURRENCY, DEFAULT_TIME_SAFETY_MARGIN_MS
from idempotent_lambda.config import DEFAULT_IN_PROGRESS_EXPIRY_SECONDS
from idempotent_lambda.persistence._aws import MAX_POOL_CONNECTIONS
from idempotent_lambda.persistence.protocol import DEFAULT_COMPRESSION_THRESHOLD_BYTES

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: The page of each public adapter module; a new adapter module fails until it gets one.
ADAPTER_PAGES = {
    "api_gateway": "http.md",
    "dynamodb_stream": "streams.md",
    "kafka": "kafka.md",
    "kinesis": "kinesis.md",
    "sqs": "sqs.md",
}


def adapter_modules() -> list[str]:
    """Return the public modules of `idempotent_lambda.adapters`."""
    paths = idempotent_lambda.adapters.__path__
    return sorted(m.name for m in pkgutil.iter_modules(paths) if not m.name.startswith("_"))


def test_every_adapter_module_has_a_page() -> None:
    """Each adapter module is mapped to its docs page, and the page exists."""
    assert adapter_modules() == sorted(ADAPTER_PAGES)
    assert all((DOCS / page).is_file() for page in ADAPTER_PAGES.values())


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_readme_and_home_page_link_every_adapter(page: str) -> None:
    """The README and the home page link the page of every adapter module."""
    text = (ROOT / page).read_text()
    missing = [
        module
        for module, target in ADAPTER_PAGES.items()
        if not re.search(rf"\]\((?:[^)]*/)?{re.escape(target)}\)", text)
    ]
    assert [] == missing


def test_default_prefixes_stated_are_the_code_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default prefix each format uses without a function name is the one the pages give."""
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    for page in ("getting-started.md", "keys-and-leases.md"):
        text = (DOCS / page).read_text()
        assert f"{{AWS_LAMBDA_FUNCTION_NAME or '{POWERTOOLS.function_name()}'}}" in text, page
        assert f"'{NATIVE.function_name()}'" in text, page


def config_table_defaults() -> dict[str, str]:
    """Return the `option | default` cells of getting-started's configuration table."""
    text = (DOCS / "getting-started.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)`", text, flags=re.MULTILINE)
    return dict(rows)


def test_config_defaults_stated_are_the_code_ones() -> None:
    """Every default in the configuration table equals `IdempotencyConfig`'s."""
    stated = config_table_defaults()
    fields = {f.name: f for f in dataclasses.fields(IdempotencyConfig)}
    actual = IdempotencyConfig()
    compared = {name: ast.literal_eval(value) for name, value in stated.items() if name in fields}
    assert {"expires_after_seconds", "record_format", "hash_function"} <= set(compared)
    assert {name: getattr(actual, name) for name in compared} == compared


def test_store_signature_block_is_the_code_one() -> None:
    """The DynamoDB store's signature on getting-started names its real defaults."""
    text = (DOCS / "getting-started.md").read_text()
    block = text.split("DynamoDBPersistenceLayer(", 1)[1].split("```", 1)[0]
    stated = dict(re.findall(r"(\w+)=([^,\n]+)", block))
    parameters = inspect.signature(DynamoDBPersistenceLayer).parameters
    assert set(stated) == {n for n, p in parameters.items() if p.default is not p.empty}
    for name, value in stated.items():
        default = parameters[name].default
        expected = getattr(default, "__name__", None) or repr(default).strip("'")
        if name == "clock":
            continue  # an object: the page names it
        assert (name, expected) == (name, value.strip("'\"")), name


def test_compression_is_stated_for_the_native_format_only() -> None:
    """The default format never compresses, so no page says results are compressed by default."""
    text = (DOCS / "getting-started.md").read_text()
    sentence = text.split("compression_threshold_bytes` are stored", 1)[0][-80:]
    assert 'record_format="native"' in sentence


#: Prose that points at a place the pages cannot link, which no page may use.
DANGLING = re.compile(r"(?:in|see) the README|The README says|lifecycle table", re.IGNORECASE)


def test_no_page_points_at_a_section_that_does_not_exist() -> None:
    """No page refers to the README for something it does not hold; every anchor resolves."""
    pages = {p.relative_to(DOCS).as_posix(): p.read_text() for p in DOCS.rglob("*.md")}
    dangling = [name for name, text in pages.items() if DANGLING.search(text)]
    assert [] == dangling
    anchors = {name: headings(text) for name, text in pages.items()}
    broken = []
    for name, text in pages.items():
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)?#([\w-]+)\)", text):
            page = str((Path(name).parent / target).as_posix()) if target else name
            page = page.removeprefix("./")
            if page in anchors and anchor not in anchors[page]:
                broken.append(f"{name} -> {target}#{anchor}")
    assert [] == broken


def headings(text: str) -> set[str]:
    """Return the anchors mkdocs gives the headings of a page."""
    found = set()
    for title in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\s-]", "", title.lower()).strip()
        found.add(re.sub(r"[\s]+", "-", slug))
    found |= set(re.findall(r'id="([\w-]+)"', text)) | set(re.findall(r"\{ *#([\w-]+)", text))
    return found


def test_the_http_page_is_boosted_for_idempotency_key_searches() -> None:
    """The search index splits "Idempotency-Key" in two common words: the HTTP page is boosted."""
    text = (DOCS / "http.md").read_text()
    front = text.split("---", 2)[1]
    assert re.search(r"^search:\n  boost: [2-9]", front, flags=re.MULTILINE)
    assert "Idempotency-Key" in text


def test_cdk_page_names_the_jsii_banner_setting_the_makefile_uses() -> None:
    """The setting docs/cdk.md offers against jsii's Node banner is the one `make` really sets."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    setting = re.search(r"JSII_SILENCE_WARNING_\w+=\d+", makefile)
    assert setting is not None
    assert f"`{setting.group()}`" in (DOCS / "cdk.md").read_text(encoding="utf-8")


TEMPLATE = (ROOT / "template.yaml").read_text(encoding="utf-8")
#: What "default N <unit>" means in prose, as a number of the option's own unit.
_UNITS = {"": 1, "s": 1, "ms": 1, "hour": 3600, "KiB": 1024}
#: Options whose defaults the pages state in prose, and the code's value of each.
_PROSE_DEFAULTS: dict[str, int] = {
    "max_concurrency": DEFAULT_MAX_CONCURRENCY,
    "time_safety_margin_ms": DEFAULT_TIME_SAFETY_MARGIN_MS,
    "in_progress_expiry_seconds": DEFAULT_IN_PROGRESS_EXPIRY_SECONDS,
    "expires_after_seconds": IdempotencyConfig().expires_after_seconds,
    "compression_threshold_bytes": DEFAULT_COMPRESSION_THRESHOLD_BYTES,
    "IdempotencyExpiryDays": int(
        re.findall(r"IdempotencyExpiryDays:\n(?: +.*\n)*? +Default: (\d+)", TEMPLATE)[0]
    ),
}


def prose_defaults() -> list[tuple[str, str, int]]:
    """Return ``(page, option, value)`` for every "`option` ... (default N unit)" on any page."""
    found = []
    pattern = re.compile(
        r"`(\w+)`[^`.]{0,40}?\(?default (\d[\d,]*) ?(ms|s|hour|KiB)?\b", flags=re.DOTALL
    )
    for page in [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]:
        for option, number, unit in pattern.findall(page.read_text(encoding="utf-8")):
            value = int(number.replace(",", "")) * _UNITS[unit or ""]
            found.append((page.name, option, value))
    return found


def test_defaults_stated_in_prose_are_the_code_ones() -> None:
    """Every "(default N)" that follows a known option, on any page, is the code's default."""
    stated = [entry for entry in prose_defaults() if entry[1] in _PROSE_DEFAULTS]
    assert {option for _, option, _ in stated} == set(_PROSE_DEFAULTS)  # every one is checked
    wrong = [entry for entry in stated if entry[2] != _PROSE_DEFAULTS[entry[1]]]
    assert wrong == []


def test_connection_pool_size_stated_is_the_code_one() -> None:
    """Every "N connections (`MAX_POOL_CONNECTIONS`)" on a page is the client's real pool size."""
    stated = [
        int(number)
        for page in DOCS.rglob("*.md")
        for number in re.findall(
            r"(\d+) connections\s+\(`MAX_POOL_CONNECTIONS`\)", page.read_text(encoding="utf-8")
        )
    ]
    assert stated
    assert set(stated) == {MAX_POOL_CONNECTIONS}


#: A number given as a default: "default 64", "defaults to 64", "default of 64", "Default: 64",
#: "64 by default".
_STATED_DEFAULT = re.compile(
    r"default(?:s to| of| is|:)?\**\s+\**(\d+)|(\d+)\**\s+by default", flags=re.IGNORECASE
)
#: The one page that states the batch adapters' default concurrency; the record of how it was
#: chosen may name it too, and must agree.
CONCURRENCY_PAGE = "batches.md"
CONCURRENCY_RECORD = "benchmarks.md"


def concurrency_defaults_stated() -> dict[str, set[int]]:
    """Return, per page, the numbers its paragraphs about `max_concurrency` give as a default."""
    stated: dict[str, set[int]] = {}
    for page in [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]:
        for paragraph in re.split(r"\n\s*\n", page.read_text(encoding="utf-8")):
            if "max_concurrency" not in paragraph:
                continue
            for match in _STATED_DEFAULT.finditer(paragraph):
                number = int(match.group(1) or match.group(2))
                stated.setdefault(page.name, set()).add(number)
    return stated


def test_the_batch_concurrency_default_is_stated_once_and_is_the_code_one() -> None:
    """batches.md states `max_concurrency`'s default; no other page restates it (they link)."""
    stated = concurrency_defaults_stated()
    assert {DEFAULT_MAX_CONCURRENCY} == stated.get(CONCURRENCY_PAGE)
    others = {page: n for page, n in stated.items() if page != CONCURRENCY_PAGE}
    assert {} == {p: n for p, n in others.items() if p != CONCURRENCY_RECORD}
    assert others.get(CONCURRENCY_RECORD, {DEFAULT_MAX_CONCURRENCY}) == {DEFAULT_MAX_CONCURRENCY}
