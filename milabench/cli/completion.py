"""`milabench completion bash|zsh`: print a shell completion script.

    milabench completion bash > ~/.local/share/bash-completion/completions/milabench
    milabench completion zsh > "${fpath[1]}/_milabench"
    eval "$(milabench completion bash)"        # or zsh: just this shell

The script is generated from the real parser: every command of `milabench.cli.COMMANDS`
and the options its module declares (`add_arguments`), with the choices of options such
as `--format` and file/folder completion for paths. The command modules are imported only
here, so `milabench --help` stays lazy. The script itself is static: pressing TAB never
starts Python.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass, field

SHELLS = ("bash", "zsh")
# Option values completed as files, or as folders (by metavar, else by name).
FILE_METAVARS = {"PATH", "FILE"}
DIR_METAVARS = {"DIR", "RUN"}
DIR_DESTS = {"base", "base_b"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")


@dataclass
class Node:
    """A command (or a sub-action such as `store import`): what can follow it."""

    help: str = ""
    options: dict[str, str] = field(default_factory=dict)  # option -> help
    values: dict[str, str | list[str]] = field(
        default_factory=dict
    )  # option -> file|dir|none|[choices]
    subcommands: dict[str, str] = field(default_factory=dict)  # name -> help
    positional: str = "none"  # file | dir | none


def _kind(action: argparse.Action) -> str | list[str]:
    if action.choices:
        return [str(c) for c in action.choices]
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    if metavar in DIR_METAVARS or action.dest in DIR_DESTS:
        return "dir"
    if metavar in FILE_METAVARS:
        return "file"
    return "none"


def _walk(parser: argparse.ArgumentParser, path: str, help: str, tree: dict[str, Node]) -> None:
    node = Node(help=help)
    tree[path] = node
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                node.subcommands[name] = helps.get(name, "")
                _walk(sub, f"{path} {name}".strip(), helps.get(name, ""), tree)
            continue
        if action.option_strings:
            text = "" if action.help == argparse.SUPPRESS else (action.help or "")
            for opt in action.option_strings:
                node.options[opt] = text
                if action.nargs != 0:
                    node.values[opt] = _kind(action)
        elif node.positional == "none":
            kind = _kind(action)
            node.positional = kind if isinstance(kind, str) else "none"
            if isinstance(kind, list):
                node.subcommands.update({c: "" for c in kind})


def command_tree() -> dict[str, Node]:
    """Every command path ("" is the top level) and what can follow it, from the parsers
    the commands declare (this imports every command module)."""
    from milabench.cli import COMMANDS

    top = argparse.ArgumentParser(prog="milabench", add_help=True)
    top.add_argument("--version", action="store_true", help="print the version")
    top.add_argument("--debug", action="store_true", help="show Python tracebacks")
    sub = top.add_subparsers(dest="command")
    for name, (modname, helptext) in COMMANDS.items():
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--debug", action="store_true", help="show Python tracebacks")
        try:
            importlib.import_module(modname).add_arguments(p)
        except Exception as err:  # a broken command still completes by name
            print(f"milabench: warning: {name}: options not completed ({err})", file=sys.stderr)
    tree: dict[str, Node] = {}
    _walk(top, "", "", tree)
    return tree


def _words(items) -> str:
    return " ".join(items)


def _sq(text: str) -> str:
    """A single-quoted shell word."""
    return "'" + text.replace("'", "'\\''") + "'"


def _bash_value_case(path: str, opt: str, kind: str | list[str]) -> str:
    """The bash ``case`` line completing the value of ``opt`` after command ``path``."""
    key = f'        "{path}:{opt}")'
    if isinstance(kind, list):
        return f'{key} _milabench_reply -W {_sq(_words(kind))} -- "$cur" ;;'
    if kind == "file":
        return f'{key} _milabench_reply -f -- "$cur" ;;'
    if kind == "dir":
        return f'{key} _milabench_reply -d -- "$cur" ;;'
    return f"{key} ;;"


def _bash_cases(tree: dict[str, Node]) -> tuple[list[str], list[str], list[str], list[str]]:
    """The bash case lines of every command: options taking a value, how each value is
    completed, the options and subcommands of each command, positional file/dir kinds."""
    takes_value, values, words, positional = [], [], [], []
    for path, node in tree.items():
        for opt, kind in node.values.items():
            takes_value.append(f'"{path}:{opt}"')
            values.append(_bash_value_case(path, opt, kind))
        opts = _words(sorted(node.options))
        subs = _words(node.subcommands)
        words.append(f'        "{path}") opts={_sq(opts)}; subs={_sq(subs)} ;;')
        if node.positional in ("file", "dir"):
            positional.append(f'        "{path}") pos={node.positional} ;;')
    return takes_value, values, words, positional


def _bash_helpers(takes_value: list[str]) -> str:
    """The script's header and its helper functions (reply, which options take a value)."""
    return f"""# bash completion for milabench (generated by `milabench completion bash`)
#   milabench completion bash > ~/.local/share/bash-completion/completions/milabench
#   or, for this shell only: eval "$(milabench completion bash)"

_milabench_reply() {{
    COMPREPLY=()
    local line
    while IFS= read -r line; do
        COMPREPLY+=("$line")
    done < <(compgen "$@")
}}

_milabench_takes_value() {{
    case "$1:$2" in
        {" | ".join(takes_value) or '"-"'}) return 0 ;;
    esac
    return 1
}}

"""


def _bash_completer(
    tree: dict[str, Node], values: list[str], words: list[str], positional: list[str]
) -> str:
    """``_milabench``, the function bash calls on TAB, and its registration."""
    nodes = " ".join(_sq(f"|{p}|") for p in tree)
    return f"""_milabench() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="" node="" word i skip=0
    local opts subs pos=none
    local nodes={_sq(nodes)}
    (( COMP_CWORD > 0 )) && prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    for (( i = 1; i < COMP_CWORD; i++ )); do
        word="${{COMP_WORDS[i]}}"
        if (( skip )); then skip=0; continue; fi
        if [[ "$word" == -* ]]; then
            [[ "$word" != *=* ]] && _milabench_takes_value "$node" "$word" && skip=1
            continue
        fi
        local next="${{node:+$node }}$word"
        [[ "$nodes" == *"'|$next|'"* ]] && node="$next"
    done
    if [[ "$prev" == -* ]] && _milabench_takes_value "$node" "$prev"; then
        COMPREPLY=()
        case "$node:$prev" in
{chr(10).join(values)}
        esac
        return 0
    fi
    case "$node" in
{chr(10).join(words)}
    esac
    case "$node" in
{chr(10).join(positional) or '        "-") ;;'}
    esac
    if [[ "$cur" == -* ]]; then
        _milabench_reply -W "$opts" -- "$cur"
    elif [[ -n "$subs" ]]; then
        _milabench_reply -W "$subs" -- "$cur"
    elif [[ "$pos" == file ]]; then
        _milabench_reply -f -- "$cur"
    elif [[ "$pos" == dir ]]; then
        _milabench_reply -d -- "$cur"
    else
        COMPREPLY=()
    fi
    return 0
}}

complete -o filenames -F _milabench milabench
"""


def bash_script(tree: dict[str, Node]) -> str:
    """The bash completion script of the command tree."""
    takes_value, values, words, positional = _bash_cases(tree)
    return _bash_helpers(takes_value) + _bash_completer(tree, values, words, positional)


def _zsh_item(name: str, text: str) -> str:
    return _sq(name.replace(":", "\\:") + (":" + " ".join(text.split()) if text else ""))


def zsh_script(tree: dict[str, Node]) -> str:
    takes_value, values, words, positional = [], [], [], []
    for path, node in tree.items():
        for opt, kind in node.values.items():
            takes_value.append(f'"{path}:{opt}"')
            if isinstance(kind, list):
                values.append(f'    "{path}:{opt}") compadd -- {" ".join(_sq(k) for k in kind)} ;;')
            elif kind == "file":
                values.append(f'    "{path}:{opt}") _files ;;')
            elif kind == "dir":
                values.append(f'    "{path}:{opt}") _files -/ ;;')
            else:
                values.append(f'    "{path}:{opt}") _message value ;;')
        opts = " ".join(_zsh_item(o, t) for o, t in sorted(node.options.items()))
        subs = " ".join(_zsh_item(s, t) for s, t in node.subcommands.items())
        words.append(f'    "{path}") opts=({opts}); subs=({subs}) ;;')
        if node.positional in ("file", "dir"):
            positional.append(f'    "{path}") pos={node.positional} ;;')
    nodes = " ".join(_sq(p) for p in tree)
    return f"""#compdef milabench
# zsh completion for milabench (generated by `milabench completion zsh`)
#   milabench completion zsh > "${{fpath[1]}}/_milabench"   (then: compinit)
#   or, for this shell only: eval "$(milabench completion zsh)"

_milabench_takes_value() {{
  case "$1:$2" in
    {" | ".join(takes_value) or '"-"'}) return 0 ;;
  esac
  return 1
}}

_milabench() {{
  local cur=${{words[CURRENT]}} prev=${{words[CURRENT-1]}} node="" word next i skip=0
  local pos=none
  local -a opts subs nodes
  nodes=({nodes})
  for (( i = 2; i < CURRENT; i++ )); do
    word=${{words[i]}}
    if (( skip )); then skip=0; continue; fi
    if [[ $word == -* ]]; then
      [[ $word != *=* ]] && _milabench_takes_value "$node" "$word" && skip=1
      continue
    fi
    next="${{node:+$node }}$word"
    (( ${{nodes[(Ie)$next]}} )) && node=$next
  done
  if [[ $prev == -* ]] && _milabench_takes_value "$node" "$prev"; then
    case "$node:$prev" in
{chr(10).join(values)}
    esac
    return
  fi
  case "$node" in
{chr(10).join(words)}
  esac
  case "$node" in
{chr(10).join(positional) or '    "-") ;;'}
  esac
  if [[ $cur == -* ]]; then
    _describe -t options option opts
  elif (( ${{#subs}} )); then
    _describe -t commands command subs
  elif [[ $pos == file ]]; then
    _files
  elif [[ $pos == dir ]]; then
    _files -/
  fi
}}

if [[ "${{funcstack[1]}}" == _milabench ]]; then
  _milabench "$@"
else
  compdef _milabench milabench
fi
"""


def run(args: argparse.Namespace) -> int:
    tree = command_tree()
    script = bash_script(tree) if args.shell == "bash" else zsh_script(tree)
    sys.stdout.write(script)
    return 0
