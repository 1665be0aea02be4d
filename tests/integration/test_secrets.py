"""A state URL's secrets are never printed, whatever form the URL takes.

Every secret below holds MARKER and nothing else printed does: the CLI runs for real (config file, state
opened from the URL, real redis-server) and MARKER must appear in no output, log line or report.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
import yaml

from tools.testbed.redis_server import free_port
from tq_gc.cli import EXIT_OK, EXIT_USAGE, main
from tq_gc.config import load_config, parse_config, redact_url
from tq_gc.errors import ConfigError
from tq_gc.state import RedisState
from tq_gc.stores import MemoryRowStore
from tq_gc.wiring import Runtime

MARKER = "s3cr3t"
PASSWORD = f"pw-{MARKER}-42"
USER = "tqgc-secrets-user"
TLS_DIR = f"/etc/tq-gc/{MARKER}"
STAGING = "rollout_staging"


# redact_url, the one function every output goes through ---------------------------------------------

REDACTIONS = [
    (f"redis://{USER}:{PASSWORD}@10.0.0.7:6379/0", f"redis://{USER}:***@10.0.0.7:6379/0"),
    (f"redis://:{PASSWORD}@redis:6379", "redis://:***@redis:6379"),
    (f"redis://u:{quote(PASSWORD + '/@?#', safe='')}@h:1/2", "redis://u:***@h:1/2"),
    (f"redis://u:p@{MARKER}@h:1/2", "redis://u:***@h:1/2"),
    (f"unix:///run/redis.sock?db=2&password={PASSWORD}", "unix:///run/redis.sock?db=2&password=***"),
    (f"unix://:{PASSWORD}@/run/redis.sock", "unix://:***@/run/redis.sock"),
    (f"redis://h:1/0?Password={PASSWORD}&socket_timeout=5", "redis://h:1/0?Password=***&socket_timeout=5"),
    (f"redis://h:1/0?pass%77ord={PASSWORD}", "redis://h:1/0?pass%77ord=***"),
    (
        f"rediss://h:6380/0?ssl_keyfile={TLS_DIR}/k.pem&ssl_certfile={TLS_DIR}/c.pem"
        f"&ssl_ca_certs={TLS_DIR}/ca.pem&ssl_password={PASSWORD}&ssl_cert_reqs=required",
        "rediss://h:6380/0?ssl_keyfile=***&ssl_certfile=***&ssl_ca_certs=***&ssl_password=***"
        "&ssl_cert_reqs=required",
    ),
    (
        f"redis://h/0?auth_token={MARKER}&client_secret={MARKER}",
        "redis://h/0?auth_token=***&client_secret=***",
    ),
    # A password with an unescaped '/', '?' or '#' ends the authority early for urlsplit (and redis-py):
    # all that precedes the last '@' is hidden, host and database stay readable.
    (f"redis://u:pw/{MARKER}@h:1/0", "redis://***@h:1/0"),
    (f"redis://:pw?{MARKER}@h:1/0", "redis://***@h:1/0"),
    (f"redis://:pw#{MARKER}@h:1/0", "redis://***@h:1/0"),
    (f"redis://h:1/0?password=pw#{MARKER}", "redis://h:1/0?password=***#***"),
    ("redis://h:1/0?password=", "redis://h:1/0?password="),
    ("redis://redis:6379/0", "redis://redis:6379/0"),
    ("memory://", "memory://"),
]


@pytest.mark.parametrize(("url", "shown"), REDACTIONS)
def test_redact_url_hides_every_secret_and_keeps_the_rest_readable(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert MARKER not in shown


# config values and errors ----------------------------------------------------------------------------

SECRET_URLS = [url for url, _ in REDACTIONS if MARKER in url or PASSWORD in url]
# Short enough that pydantic's error text, which elides the middle of a long input, would show it whole.
SHORT_SECRET_URLS = [f"redis://:{MARKER}@h", f"unix:///s?password={MARKER}"]


def exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


@pytest.mark.parametrize("url", SECRET_URLS)
def test_config_repr_str_and_redacted_hide_the_url_secrets(url: str) -> None:
    config = parse_config({"state_url": url})
    assert config.state_url == url  # the value itself is intact: only its printed forms are redacted
    shown = [repr(config), str(config), json.dumps(config.redacted()), repr(config.redacted())]
    assert all(MARKER not in text for text in shown)


@pytest.mark.parametrize("url", SECRET_URLS + SHORT_SECRET_URLS)
@pytest.mark.parametrize(
    "bad",
    [
        {"grace_seconds": 1},
        {"grace_seconds": "ten"},
        {"bogus": 1},
        {"scope": [{"partition": "rollout_data"}]},
    ],
)
def test_a_config_error_never_carries_the_url_not_even_in_its_context(
    url: str, bad: dict[str, object]
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"state_url": url, **bad})
    for exc in exception_chain(caught.value):
        assert MARKER not in f"{exc!s} {exc!r}"


@pytest.mark.parametrize(
    "url", [f"postgres://:{PASSWORD}@db/0", f"mysql://db/0?password={PASSWORD}", f"pg://:{MARKER}@h"]
)
def test_an_unknown_scheme_is_refused_without_the_secret(url: str) -> None:
    with pytest.raises(ConfigError, match="state_url") as caught:
        parse_config({"state_url": url})
    assert all(MARKER not in f"{exc!s} {exc!r}" for exc in exception_chain(caught.value))


# the CLI, for real -----------------------------------------------------------------------------------


@pytest.fixture
def acl_user(redis_url: str) -> Iterator[int]:
    """A user with PASSWORD on the session's redis-server (its default user stays password-less)."""
    client = redis.Redis.from_url(redis_url)
    try:
        client.acl_setuser(USER, enabled=True, passwords=[f"+{PASSWORD}"], keys=["*"], channels=["*"],
                           commands=["+@all"])  # fmt: skip
        yield int(redis_url.rsplit(":", 1)[1].split("/")[0])
    finally:
        client.acl_deluser(USER)
        client.close()


@pytest.fixture(scope="module")
def unix_socket_redis() -> Iterator[str]:
    """A redis-server on a unix socket only, requiring PASSWORD: `unix://` takes it as `?password=`."""
    binary = shutil.which("redis-server")
    assert binary is not None, "redis-server not found"
    with tempfile.TemporaryDirectory(prefix="tqgc-sock-") as workdir:
        socket_path = f"{workdir}/redis.sock"
        args = [binary, "--port", "0", "--unixsocket", socket_path, "--unixsocketperm", "700",
                "--requirepass", PASSWORD, "--save", "", "--appendonly", "no"]  # fmt: skip
        process = subprocess.Popen(args, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_ping(socket_path)
            yield socket_path
        finally:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_for_ping(socket_path: str) -> None:
    client = redis.Redis(unix_socket_path=socket_path, password=PASSWORD, socket_timeout=0.5)
    try:
        for _ in range(200):
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server on {socket_path} did not answer")
    finally:
        client.close()


TLS_QUERY = (
    f"ssl_keyfile={TLS_DIR}/client.key&ssl_certfile={TLS_DIR}/client.crt&ssl_ca_certs={TLS_DIR}/ca.crt"
    f"&ssl_password={PASSWORD}"
)
# (name, URL template, whether the live variant really connects): {port} and {socket} are filled in.
FORMS = [
    ("user-info", f"redis://{USER}:{PASSWORD}@127.0.0.1:{{port}}/0", True),
    ("percent-encoded user-info", f"redis://{USER}:{quote(PASSWORD)}@127.0.0.1:{{port}}/0", True),
    ("query", f"redis://127.0.0.1:{{port}}/0?username={USER}&password={PASSWORD}", True),
    ("unix query", f"unix://{{socket}}?password={PASSWORD}", True),
    # The session's redis-server speaks no TLS: the handshake fails, an error path with key paths in the URL.
    ("tls key material", f"rediss://127.0.0.1:{{port}}/0?{TLS_QUERY}", False),
]
COMMANDS = [["check"], ["status"], ["sweep"], ["sweep", "--execute"], ["audit"], ["admissions"]]


def run_cli(
    config_path: Path, capsys: pytest.CaptureFixture[str], log_format: str = "text"
) -> list[tuple[list[str], int, str]]:
    """Every command, human and --json: (argv, exit code, stdout + stderr)."""
    results = []
    for command in COMMANDS:
        for extra in ([], ["--json"]):
            log_options = ["--log-level", "DEBUG", "--log-format", log_format]
            argv = [*log_options, *command, "--config", str(config_path), *extra]
            capsys.readouterr()
            rows = MemoryRowStore()
            rows.put(STAGING, "r1")  # the job's partition exists (check fails a missing one)
            code = main(argv, Runtime(row_store=rows))
            out, err = capsys.readouterr()
            results.append((argv, code, out + err))
    return results


def write_config(tmp_path: Path, url: str) -> Path:
    config = {
        "namespace": "secrets-test",
        "state_url": url,
        "scope": [{"partition": STAGING, "all_keys": True}],
    }
    path = tmp_path / "gc.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def live_endpoints(acl_user: int, unix_socket_redis: str) -> dict[str, object]:
    return {"port": acl_user, "socket": unix_socket_redis}


@pytest.fixture
def dead_endpoints(tmp_path: Path) -> dict[str, object]:
    return {"port": free_port(), "socket": str(tmp_path / "no-such.sock")}


def assert_nothing_printed_the_secret(
    results: list[tuple[list[str], int, str]], caplog: pytest.LogCaptureFixture
) -> None:
    for argv, _code, output in results:
        assert MARKER not in output, (argv, output)
    assert MARKER not in caplog.text


@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.parametrize(("form", "template", "connects"), FORMS, ids=[f[0] for f in FORMS])
def test_a_reachable_store_url_prints_no_secret(
    form: str,
    template: str,
    connects: bool,
    log_format: str,
    live_endpoints: dict[str, object],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    results = run_cli(write_config(tmp_path, template.format(**live_endpoints)), capsys, log_format)
    assert_nothing_printed_the_secret(results, caplog)
    check_json = next(output for argv, _, output in results if argv[4] == "check" and "--json" in argv)
    state_check = next(
        c for c in json.loads(check_json.splitlines()[0])["checks"] if c["name"] == "state store"
    )
    assert state_check["ok"] is connects, state_check  # the live forms really authenticated
    if connects:
        assert all(code == EXIT_OK for _, code, _ in results), results
        assert "***" in state_check["detail"]


@pytest.mark.parametrize(("form", "template", "connects"), FORMS, ids=[f[0] for f in FORMS])
def test_an_unreachable_store_url_prints_no_secret_on_the_error_path(
    form: str,
    template: str,
    connects: bool,
    dead_endpoints: dict[str, object],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    results = run_cli(write_config(tmp_path, template.format(**dead_endpoints)), capsys)
    assert_nothing_printed_the_secret(results, caplog)
    assert all(code != EXIT_OK for _, code, _ in results), results  # every command met the dead store
    assert any("***" in output for _, _, output in results)  # errors still say which store failed


def test_a_malformed_url_with_a_password_is_refused_without_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    config_path = write_config(tmp_path, f"redis://:pw/{MARKER}@127.0.0.1:1/0")
    results = run_cli(config_path, capsys)
    assert_nothing_printed_the_secret(results, caplog)
    assert {code for _, code, _ in results} <= {EXIT_USAGE, 1, 4}


def test_redis_py_refusing_a_url_leaves_no_secret_in_the_error_chain() -> None:
    # redis-py's own error quotes the part it cannot parse: here a "port" that is the password's head.
    with pytest.raises(ConfigError, match="not a valid Redis URL") as caught:
        RedisState.from_url(f"redis://:{MARKER}/x@127.0.0.1:1/0", "job")
    assert all(MARKER not in f"{exc!s} {exc!r}" for exc in exception_chain(caught.value))


# a config file that is not valid YAML: the error names the place, never quotes the line -----------------

BROKEN_YAML = [
    f'state_url: "redis://:{PASSWORD}@redis:6379/0\nnamespace: job\n',  # an unclosed quote
    f"namespace: job\nstate_url: redis://:{PASSWORD}@redis:6379/0\n  grace_seconds: 900\n",  # bad indent
    f"state_url: [redis://:{PASSWORD}@redis:6379/0\n",  # an unclosed flow sequence
    f"state_url: redis://:{PASSWORD}@redis:6379/0\n\tnamespace: job\n",  # a tab
    f"state_url: @redis://:{PASSWORD}@redis:6379/0\n",  # a reserved indicator
    f"{{state_url: redis://:{PASSWORD}@h/0, namespace: job\n",  # an unclosed flow mapping
]


@pytest.mark.parametrize("text", BROKEN_YAML)
def test_a_yaml_error_names_the_line_but_never_quotes_it(tmp_path: Path, text: str) -> None:
    path = tmp_path / "gc.yaml"
    path.write_text(text)
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(text)  # each example really is malformed
    with pytest.raises(ConfigError, match="not valid YAML") as caught:
        load_config(path, env={})
    message = str(caught.value)
    assert "line " in message, message
    for exc in exception_chain(caught.value):
        assert MARKER not in f"{exc!s} {exc!r}"


def test_the_cli_prints_no_secret_for_a_file_that_is_not_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gc.yaml"
    path.write_text(BROKEN_YAML[0])
    assert main(["check", "--config", str(path)]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert "not valid YAML" in captured.err
    assert MARKER not in captured.out + captured.err
