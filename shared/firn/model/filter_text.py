"""The string form of a filter: a small SQL ``WHERE`` clause, parsed into Firn's
filter classes (``firn.model.filters``). Grammar (keywords in any case)::

    filter     := or
    or         := and ( OR and )*
    and        := not ( AND not )*
    not        := NOT not | '(' filter ')' | predicate
    predicate  := column ( op literal | [NOT] IN '(' literal ( ',' literal )* ')'
                         | IS [NOT] NULL )
    op         := = | == | != | <> | < | <= | > | >=
    column     := name | "any name" | `any name`        (name: letters, digits, _)
    literal    := 'text' ('' inside for ')  | [-]integer | [-]decimal[e[-]n]
                | TRUE | FALSE | DATE 'yyyy-mm-dd' | TIMESTAMP 'iso text' | X'hex'

Literals are checked against their columns when the filter is bound; a plain
string also works for a date, timestamp or decimal column (Arrow parses it). Every
error is a ``ConfigError`` saying what was expected and where.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from firn.errors import ConfigError
from firn.model.filters import (
    And,
    ArrowFilter,
    Compare,
    Filter,
    In,
    IsNull,
    Literal,
    Not,
    Or,
    bind,
)

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<hex>[xX]'[^']*')
    | (?P<string>'(?:[^']|'')*')
    | (?P<quoted>"(?:[^"]|"")*"|`(?:[^`]|``)*`)
    | (?P<number>-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
    | (?P<op><=|>=|<>|!=|==|=|<|>)
    | (?P<punct>[(),])
    | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_KEYWORDS = {"AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE", "DATE", "TIMESTAMP"}


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    at: int


def _tokens(text: str) -> list[_Token]:
    out = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.lastgroup is None:
            start = len(text[pos:]) - len(text[pos:].lstrip()) + pos
            raise ConfigError(
                f"bad filter {text!r}: unexpected {text[start : start + 10]!r} at position {start}"
            )
        kind = match.lastgroup
        out.append(_Token(kind, match.group(kind), match.start(kind)))
        pos = match.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.pos = 0

    def fail(self, expected: str) -> ConfigError:
        if self.pos < len(self.tokens):
            token = self.tokens[self.pos]
            found = f"{token.text!r} at position {token.at}"
        else:
            found = "the end"
        return ConfigError(f"bad filter {self.text!r}: expected {expected}, found {found}")

    def peek_word(self) -> str | None:
        if self.pos < len(self.tokens) and self.tokens[self.pos].kind == "word":
            return self.tokens[self.pos].text.upper()
        return None

    def accept_word(self, word: str) -> bool:
        if self.peek_word() == word:
            self.pos += 1
            return True
        return False

    def accept(self, kind: str, text: str | None = None) -> _Token | None:
        if self.pos < len(self.tokens):
            token = self.tokens[self.pos]
            if token.kind == kind and (text is None or token.text == text):
                self.pos += 1
                return token
        return None

    def expect(self, kind: str, text: str, what: str) -> None:
        if self.accept(kind, text) is None:
            raise self.fail(what)

    def parse(self) -> Filter:
        if not self.tokens:
            raise ConfigError("the filter is empty; pass filter=None to read every row")
        result = self.or_()
        if self.pos < len(self.tokens):
            raise self.fail("AND, OR or the end")
        return result

    def or_(self) -> Filter:
        parts = [self.and_()]
        while self.accept_word("OR"):
            parts.append(self.and_())
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def and_(self) -> Filter:
        parts = [self.not_()]
        while self.accept_word("AND"):
            parts.append(self.not_())
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def not_(self) -> Filter:
        if self.accept_word("NOT"):
            return Not(self.not_())
        if self.accept("punct", "("):
            inner = self.or_()
            self.expect("punct", ")", "')'")
            return inner
        return self.predicate()

    def column(self) -> str:
        token = self.accept("quoted")
        if token is not None:
            quote = token.text[0]
            return token.text[1:-1].replace(quote * 2, quote)
        word = self.peek_word()
        if word is None or word in _KEYWORDS:
            raise self.fail("a column name")
        self.pos += 1
        return self.tokens[self.pos - 1].text

    def predicate(self) -> Filter:
        column = self.column()
        if self.accept_word("IS"):
            negated = self.accept_word("NOT")
            if not self.accept_word("NULL"):
                raise self.fail("NULL")
            return IsNull(column, negated)
        negated = self.accept_word("NOT")
        if self.accept_word("IN"):
            self.expect("punct", "(", "'(' after IN")
            values = [self.literal()]
            while self.accept("punct", ","):
                values.append(self.literal())
            self.expect("punct", ")", "',' or ')'")
            found = In(column, tuple(values))
            return Not(found) if negated else found
        if negated:
            raise self.fail("IN after NOT")
        op = self.accept("op")
        if op is None:
            raise self.fail(f"a comparison (=, !=, <, <=, >, >=), IN or IS after {column!r}")
        if self.peek_word() == "NULL":
            raise self.fail("a value (compare with NULL using IS NULL or IS NOT NULL)")
        symbol = {"==": "=", "<>": "!="}.get(op.text, op.text)
        return Compare(column, symbol, self.literal())

    def literal(self) -> Literal:
        token = self.accept("string")
        if token is not None:
            return _unquote(token.text)
        token = self.accept("number")
        if token is not None:
            text = token.text
            return float(text) if any(c in text for c in ".eE") else int(text)
        token = self.accept("hex")
        if token is not None:
            return _typed("X", token.text[2:-1], self)
        word = self.peek_word()
        if word in ("TRUE", "FALSE"):
            self.pos += 1
            return word == "TRUE"
        if word in ("DATE", "TIMESTAMP"):
            self.pos += 1
            token = self.accept("string")
            if token is None:
                raise self.fail(f"a quoted value after {word}")
            return _typed(word, _unquote(token.text), self)
        raise self.fail("a value: 'text', a number, TRUE, FALSE, DATE '...', TIMESTAMP '...'")


def _unquote(text: str) -> str:
    return text[1:-1].replace("''", "'")


def _typed(word: str, text: str, parser: _Parser) -> Literal:
    try:
        if word == "DATE":
            return dt.date.fromisoformat(text)
        if word == "TIMESTAMP":
            return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        return bytes.fromhex(text)
    except ValueError as exc:
        raise ConfigError(f"bad filter {parser.text!r}: {word} {text!r}: {exc}") from exc


def parse_filter(text: str) -> Filter:
    """The string form parsed into Firn's filter classes (unbound: columns and
    literal types are checked by ``firn.model.filters.bind``)."""
    return _Parser(text).parse()


def as_filter(value: object, schema: pa.Schema) -> Filter | None:
    """Any accepted filter form, bound to ``schema``; ``None`` for no filter.
    ``ConfigError`` names an unknown column, a literal that does not fit its
    column, or (for the string form) the syntax error."""
    if value is None:
        return None
    if isinstance(value, str):
        return bind(parse_filter(value), schema)
    if isinstance(value, pc.Expression):
        return bind(ArrowFilter(value), schema)
    if isinstance(value, Compare | In | IsNull | And | Or | Not | ArrowFilter):
        return bind(value, schema)
    raise ConfigError(
        "filter must be a string such as \"region = 'eu' and id in (1, 2)\", a "
        f"pyarrow.compute.Expression or a firn filter, got {type(value).__name__}"
    )
