"""Secrets in a state store URL: what is shown of it in every repr, log line, report and error."""

from __future__ import annotations

from urllib.parse import unquote_plus

REDACTED = "***"

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
