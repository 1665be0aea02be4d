"""Secrets in a URL (the state store's, the Pushgateway's, the Ray cluster's): what is shown of it in
every repr, log line, report and error, and how an error message that quotes one is cleaned."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote, unquote_plus

REDACTED = "***"
# A secret this short cannot be told from ordinary words in a message: it is not searched for there.
_SHORTEST_SECRET_SEARCHED = 3
# A URL quoted in a message: a scheme, "://", and everything up to a space or a quote.
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")

# A URL query parameter whose name holds one of these carries a secret or names key material.
_SECRET_PARAMETER_WORDS = (
    "pass", "secret", "token", "key", "certfile", "ca_certs", "ca_data", "credential", "auth",
)  # fmt: skip


def redact_url(url: str) -> str:
    """`url` with every secret replaced by ***, the rest left readable: the user-info password, the
    value of each query parameter whose name says secret or key material (`?password=` is how
    `unix://` takes one; `ssl_keyfile`, `ssl_password`...), and any fragment (redis-py ignores it, so
    it can only be the tail of a password holding an unescaped '#')."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = "", url
    user_info, rest = _split_user_info(rest)
    rest, hash_sign, fragment = rest.partition("#")
    path, question_mark, query = rest.partition("?")
    shown = scheme + separator + user_info + path + question_mark + _redact_query(query)
    return shown + hash_sign + (REDACTED if fragment else "")


def redact_text(text: str, urls: Iterable[str] = ()) -> str:
    """`text` (an error message, a log line) safe to print: every secret of each of `urls` hidden
    wherever it appears (a client may quote a piece of a URL: "nonnumeric port: 'pw@host'"), then every
    URL in it redacted (redact_url)."""
    for secret in sorted({s for url in urls for s in _secrets_of(url)}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return _URL_IN_TEXT.sub(lambda found: redact_url(found.group(0)), text)


def _secrets_of(url: str) -> set[str]:
    """What redact_url hides of `url`, as written and percent-decoded (the short ones left out)."""
    _scheme, separator, rest = url.partition("://")
    if not separator:
        rest = url
    hidden = []
    shown_user_info, after = _split_user_info(rest)
    if shown_user_info:
        user_info = rest[: len(rest) - len(after) - 1]
        hidden.append(user_info if shown_user_info == f"{REDACTED}@" else user_info.partition(":")[2])
    after, _, fragment = after.partition("#")
    hidden.append(fragment)
    for parameter in after.partition("?")[2].split("&"):
        name, _, value = parameter.partition("=")
        if _names_a_secret(unquote_plus(name)):
            hidden.append(value)
    found = {variant for secret in hidden for variant in (secret, unquote(secret), unquote_plus(secret))}
    return {secret for secret in found if len(secret) >= _SHORTEST_SECRET_SEARCHED}


def _split_user_info(rest: str) -> tuple[str, str]:
    """(user-info shown, the rest). The user-info ends at the last '@' before any query value: a
    password may hold '@' (and a query value may too)."""
    query_start = rest.find("?")
    first_value = rest.find("=", query_start) if query_start >= 0 else -1
    at = rest.rfind("@", 0, first_value if first_value >= 0 else len(rest))
    if at < 0:
        return "", rest
    user_info, rest = rest[:at], rest[at + 1 :]
    if any(char in user_info for char in "/?#"):
        # An unescaped '/', '?' or '#' in the password: no telling the user name from it.
        return f"{REDACTED}@", rest
    user, colon, _password = user_info.partition(":")
    return (f"{user}:{REDACTED}@" if colon else f"{user}@"), rest


def _redact_query(query: str) -> str:
    parameters = []
    for parameter in query.split("&"):
        name, _, value = parameter.partition("=")
        if value and _names_a_secret(unquote_plus(name)):
            parameter = f"{name}={REDACTED}"
        parameters.append(parameter)
    return "&".join(parameters)


def _names_a_secret(parameter_name: str) -> bool:
    lowered = parameter_name.lower()
    return any(word in lowered for word in _SECRET_PARAMETER_WORDS)
