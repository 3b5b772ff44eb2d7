"""`calculate`: arithmetic from the LLM, evaluated by walking a whitelisted AST. Nothing is ever passed to eval.

Allowed: numbers, + - * / // % **, parentheses, the functions in FUNCTIONS, the constants pi and e, caller-given
variables, and names of earlier steps in a multi-step calculation. Anything else (attributes, subscripts, strings,
lambdas, dunder names) is refused with a message. Powers and factorials are bounded before they are computed, so a
request like 9**9**9 is refused instead of hanging the worker, and every intermediate value is bounded after it is
computed: integers by their digits, lists by their elements and nesting; round's digits are bounded too.
Arithmetic takes numbers only (no list repetition such as [0]*1000), so one value never holds more than
MAX_ELEMENTS numbers of at most MAX_INT_DIGITS digits, whatever a document tells the model to compute.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from srag_core.tools._base import Args, ToolError, tool

MAX_EXPR_CHARS = 1000
MAX_NODES = 300
MAX_RESULT_DIGITS = 300  # what a power may produce (checked before computing it)
MAX_INT_DIGITS = 400  # any integer value (factorial(170) has 307 digits)
MAX_ELEMENTS = 1000  # numbers in one value, across all its nested lists
MAX_DEPTH = 3  # nesting of lists


def _log(x: float, base: float | None = None) -> float:
    return math.log(x) if base is None else math.log(x, base)


def _whole(n: float, lo: int, hi: int, what: str) -> int:
    """`n` as an int if it is a whole number from lo to hi, else a ToolError saying "{what} from {lo} to {hi}"."""
    if n != int(n) or not lo <= n <= hi:
        raise ToolError(f"{what} from {lo} to {hi}")
    return int(n)


def _factorial(n: float) -> int:
    return math.factorial(_whole(n, 0, 170, "factorial takes a whole number"))


def _round(x: float, digits: float | None = None) -> float:
    if digits is None:
        return round(x)
    # bounded, since round(1, -10**7) would compute 10**(10**7)
    return round(x, _whole(digits, -MAX_INT_DIGITS, MAX_INT_DIGITS, "round takes a whole number of digits"))


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt, "cbrt": lambda x: math.copysign(abs(x) ** (1 / 3), x), "log": _log, "ln": math.log,
    "log2": math.log2, "log10": math.log10, "exp": math.exp, "abs": abs, "round": _round, "ceil": math.ceil,
    "floor": math.floor, "pow": lambda a, b: _power(a, b), "min": min, "max": max, "sum": lambda *a: sum(_flat(a)),
    "factorial": _factorial, "gcd": lambda *a: math.gcd(*(int(x) for x in a)),
}
CONSTANTS = {"pi": math.pi, "e": math.e}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _flat(args: tuple) -> list:
    return [x for a in args for x in (a if isinstance(a, (list, tuple)) else [a])]


def _power(base: float, exp: float) -> float:
    # log10 of the result's size, signed: 10**-400 is a tiny float, 0.5**-2000 a huge one
    if base != 0 and exp * math.log10(abs(base)) > MAX_RESULT_DIGITS:
        raise ToolError(f"{_short(base)}**{_short(exp)} has more than {MAX_RESULT_DIGITS} digits; that is too "
                        "large to compute")
    result = base ** exp
    if isinstance(result, complex):  # (-8)**(1/3)
        raise ToolError(f"{_short(base)}**{_short(exp)} is not a real number; use cbrt() for a cube root")
    return result


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text)} digits)"


def evaluate(expr: str, names: dict[str, Any]) -> Any:
    if not isinstance(expr, str) or not expr.strip():
        raise ToolError("expression is empty")
    if len(expr) > MAX_EXPR_CHARS:
        raise ToolError(f"expression is {len(expr)} characters; the limit is {MAX_EXPR_CHARS}")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        raise ToolError(f"cannot parse {expr!r}: {e.msg}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ToolError("expression is too complex")
    try:
        return _eval(tree.body, names)
    except ToolError:
        raise
    except ZeroDivisionError:
        raise ToolError(f"division by zero in {expr!r}") from None
    except (OverflowError, ValueError, TypeError) as e:
        raise ToolError(f"cannot evaluate {expr!r}: {e}") from None


def _eval(node: ast.AST, names: dict[str, Any]) -> Any:
    return _bounded(_eval_node(node, names))


def _bounded(value: Any) -> Any:
    """`value` if it stays within the size limits, else a ToolError; cheap, and it stops counting at the limit."""
    budget = [MAX_ELEMENTS]

    def walk(v: Any, depth: int) -> None:
        if isinstance(v, list):
            if depth >= MAX_DEPTH:
                raise ToolError(f"lists nest deeper than {MAX_DEPTH} levels")
            for x in v:
                walk(x, depth + 1)
            return
        budget[0] -= 1
        if budget[0] < 0:
            raise ToolError(f"a value holds more than {MAX_ELEMENTS} numbers")
        if isinstance(v, int) and v.bit_length() > MAX_INT_DIGITS * 3.33:  # 3.33 bits per decimal digit
            raise ToolError(f"a result has more than {MAX_INT_DIGITS} digits; that is too large to compute")

    walk(value, 0)
    return value


def _number(value: Any) -> Any:
    if isinstance(value, list):
        raise ToolError("arithmetic operators take numbers, not lists; use sum(), min() or max() on a list")
    return value


def _eval_node(node: ast.AST, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Pow):
            return _power(_number(_eval(node.left, names)), _number(_eval(node.right, names)))
        if isinstance(node.op, ast.BitXor):
            raise ToolError("'^' is not a power here: write ** (for example 2**3)")
        if type(node.op) in _BINARY:
            return _BINARY[type(node.op)](_number(_eval(node.left, names)), _number(_eval(node.right, names)))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_number(_eval(node.operand, names)))
    if isinstance(node, ast.Name):
        if node.id in names:
            return names[node.id]
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        raise ToolError(f"unknown name {node.id!r}; pass it in 'variables' or define it in an earlier step")
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(x, names) for x in node.elts]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
        if node.keywords:
            raise ToolError(f"{node.func.id}() takes positional arguments only")
        return FUNCTIONS[node.func.id](*[_eval(x, names) for x in node.args])
    raise ToolError(f"{type(node).__name__} is not allowed; use numbers, + - * / // % **, parentheses and "
                    f"the functions {', '.join(FUNCTIONS)}")


def display(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return format(value, ".10g")
    return str(value)


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")
    expr: str


class CalculateArgs(Args):
    expr: str | None = None
    expressions: list[Step] | None = Field(None, max_length=30)
    variables: dict[str, float] = Field(default_factory=dict)


@tool("calculate", "Evaluate arithmetic safely: + - * / // % ** and sqrt, cbrt, log, log2, log10, ln, exp, abs, "
                   "round, ceil, floor, pow, min, max, sum, factorial, gcd; constants pi, e; named multi-step.",
      examples=({"expr": "1234.5 / 67.8"},
                {"expr": "(revenue - cost) / revenue * 100", "variables": {"revenue": 5400, "cost": 3200}},
                {"expressions": [{"name": "margin", "expr": "revenue - cost"},
                                 {"name": "pct", "expr": "margin / revenue * 100"}],
                 "variables": {"revenue": 5400, "cost": 3200}}))
def calculate(a: CalculateArgs, ws) -> dict:
    for name in a.variables:
        if not name.isidentifier() or name.startswith("_"):
            raise ToolError(f"variable name {name!r} is not allowed")
    names: dict[str, Any] = dict(a.variables)
    if a.expressions:
        steps = []
        for s in a.expressions:
            names[s.name] = evaluate(s.expr, names)
            steps.append({"name": s.name, "expr": s.expr, "result": names[s.name]})
        last = steps[-1]["result"]
        return {"steps": steps, "result": last, "display": display(last)}
    if a.expr is None:
        raise ToolError("calculate needs 'expr' or 'expressions'")
    value = evaluate(a.expr, names)
    return {"name": "result", "expr": a.expr, "result": value, "display": display(value)}
