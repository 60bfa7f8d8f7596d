"""tf.flags / tf.app.flags: TF1's command-line flags (absl's behaviour for what scripts use).

    import tfplus as tf
    tf.app.flags.DEFINE_integer("batch_size", 32, "examples per step")
    FLAGS = tf.app.flags.FLAGS
    def main(argv):            # argv: the program name and the arguments no flag took
        print(FLAGS.batch_size)
    tf.app.run()               # python script.py --batch_size=64

`--name=value`, `--name value`, `--flag` / `--noflag` for booleans, `--` ends the flags. Reading a flag
before tf.app.run parses sys.argv first (unknown arguments are left alone), as TF1's FLAGS does.
"""
from __future__ import annotations

import difflib
import sys
from typing import Any, Callable


class Error(Exception):
    """A bad flag definition or command line; the message names the flag."""


class IllegalFlagValueError(Error, ValueError):
    pass


class UnrecognizedFlagError(Error):
    pass


def _parse_bool(text: str) -> bool:
    low = text.lower()
    if low in ("true", "t", "1", "yes", "y"):
        return True
    if low in ("false", "f", "0", "no", "n"):
        return False
    raise ValueError(f"{text!r} is not a boolean (true/false)")


class _Flag:
    def __init__(self, name: str, default, help: str, parse: Callable[[str], Any], kind: str, is_bool=False):
        self.name, self.help, self.parse, self.kind, self.is_bool = name, help, parse, kind, is_bool
        # A default given as text (DEFINE_integer("n", "3", ...)) is parsed like the command line's.
        self.default = parse(default) if isinstance(default, str) and kind != "string" else default
        self.value = self.default
        self.present = False

    def set(self, text) -> None:
        try:
            self.value = self.parse(text) if isinstance(text, str) else text
        except ValueError as e:
            raise IllegalFlagValueError(f"flag --{self.name}={text}: {e}") from None
        self.present = True


class FlagValues:
    """The flags of the program: `FLAGS.name` reads one, `FLAGS(argv)` parses a command line and returns the
    arguments no flag took (argv[0] first)."""

    def __init__(self):
        self.__dict__["_flags"] = {}
        self.__dict__["_parsed"] = False

    # -- definition ---------------------------------------------------------------------------------------
    def _define(self, flag: _Flag) -> None:
        if flag.name in self._flags:
            raise Error(f"flag --{flag.name} is defined twice")
        self._flags[flag.name] = flag

    # -- access ---------------------------------------------------------------------------------------------
    def __getattr__(self, name: str):
        flags = self.__dict__["_flags"]
        if name.startswith("__") or name not in flags:
            raise AttributeError(f"no flag named {name!r} is defined (define it with tf.app.flags.DEFINE_*)")
        if not self.__dict__["_parsed"]:
            # TF1: reading a flag before app.run parses sys.argv, tolerating arguments that are not flags.
            self(sys.argv, known_only=True)
        return flags[name].value

    def __setattr__(self, name: str, value) -> None:
        if name not in self._flags:
            raise AttributeError(f"no flag named {name!r} is defined")
        self._flags[name].value = value

    def __contains__(self, name: str) -> bool:
        return name in self._flags

    def __iter__(self):
        return iter(self._flags)

    def is_parsed(self) -> bool:
        return self._parsed

    def mark_as_parsed(self) -> None:
        self.__dict__["_parsed"] = True

    def flag_values_dict(self) -> dict:
        return {name: flag.value for name, flag in self._flags.items()}

    def get_flag_value(self, name: str, default):
        return self._flags[name].value if name in self._flags else default

    def unparse_flags(self) -> None:
        for flag in self._flags.values():
            flag.value, flag.present = flag.default, False
        self.__dict__["_parsed"] = False

    def __getitem__(self, name: str) -> _Flag:
        return self._flags[name]

    # -- parsing --------------------------------------------------------------------------------------------
    def __call__(self, argv, known_only: bool = False) -> list[str]:
        """Parses argv (argv[0] is the program); returns [argv[0]] + the arguments no flag took. An unknown
        `--flag` is an error unless `known_only`."""
        argv = list(argv)
        if not argv:
            raise Error("FLAGS(argv): argv must hold at least the program name")
        rest, args, i = [argv[0]], argv[1:], 0
        while i < len(args):
            arg = args[i]
            i += 1
            if arg == "--":
                rest.extend(args[i:])
                break
            if not arg.startswith("-") or arg == "-":
                rest.append(arg)
                continue
            body = arg.lstrip("-")
            name, has_value, value = body.partition("=")
            if name in ("help", "helpfull", "h", "?") and not has_value:
                print(self.help_text())
                sys.exit(0)
            flag = self._flags.get(name)
            if flag is None and name.startswith("no") and not has_value:
                negated = self._flags.get(name[2:])
                if negated is not None and negated.is_bool:
                    negated.set(False)
                    continue
            if flag is None:
                if known_only:
                    rest.append(arg)
                    continue
                close = difflib.get_close_matches(name, list(self._flags), n=1, cutoff=0.6)
                raise UnrecognizedFlagError(f"unknown command line flag {arg!r}"
                                            + (f"; did you mean --{close[0]}?" if close else ""))
            if not has_value:
                if flag.is_bool:
                    flag.set(True)
                    continue
                if i >= len(args):
                    raise IllegalFlagValueError(f"flag --{name} needs a value")
                value = args[i]
                i += 1
            flag.set(value)
        self.mark_as_parsed()
        return rest

    def help_text(self) -> str:
        lines = ["flags:"]
        for flag in self._flags.values():
            lines.append(f"  --{flag.name}: {flag.help}\n    (default: {flag.default!r}, {flag.kind})")
        return "\n".join(lines)


FLAGS = FlagValues()


def _list(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()] if text else []


def DEFINE_string(name, default, help, flag_values=FLAGS, **kwargs):  # noqa: N802 (TF1's names)
    flag_values._define(_Flag(name, default, help, str, "string"))


def DEFINE_integer(name, default, help, lower_bound=None, upper_bound=None, flag_values=FLAGS, **kwargs):  # noqa: N802
    def parse(text):
        value = int(text)
        if (lower_bound is not None and value < lower_bound) or (upper_bound is not None and value > upper_bound):
            raise ValueError(f"{value} is outside [{lower_bound}, {upper_bound}]")
        return value
    flag_values._define(_Flag(name, default, help, parse, "integer"))


def DEFINE_float(name, default, help, lower_bound=None, upper_bound=None, flag_values=FLAGS, **kwargs):  # noqa: N802
    def parse(text):
        value = float(text)
        if (lower_bound is not None and value < lower_bound) or (upper_bound is not None and value > upper_bound):
            raise ValueError(f"{value} is outside [{lower_bound}, {upper_bound}]")
        return value
    flag_values._define(_Flag(name, default, help, parse, "float"))


def DEFINE_boolean(name, default, help, flag_values=FLAGS, **kwargs):  # noqa: N802
    flag_values._define(_Flag(name, default, help, _parse_bool, "boolean", is_bool=True))


DEFINE_bool = DEFINE_boolean


def DEFINE_list(name, default, help, flag_values=FLAGS, **kwargs):  # noqa: N802
    default = _list(default) if isinstance(default, str) else default
    flag_values._define(_Flag(name, default, help, _list, "list"))


def DEFINE_enum(name, default, enum_values, help, flag_values=FLAGS, **kwargs):  # noqa: N802
    def parse(text):
        if text not in enum_values:
            raise ValueError(f"{text!r} is not one of {list(enum_values)}")
        return text
    if default is not None and default not in enum_values:
        raise Error(f"flag --{name}: default {default!r} is not one of {list(enum_values)}")
    flag_values._define(_Flag(name, default, help, parse, "enum"))
