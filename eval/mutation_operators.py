"""Mutation operators: the typical bugs of a TF -> JAX translation, planted one at a time.

Each operator looks at one kind of node and proposes replacements, each a plausible
translation bug (an activation swapped, ``deterministic`` inverted, an epsilon moved out of
a square root, a written-out Keras initializer dropped, ...). ``mutants(source)`` lists every mutant of a module's source with the
operator, the lines it touches and a short description; applying one is
``module.deep_replace(old, new)``, so the rest of the file stays byte for byte.

Not mutated: annotations, decorators, imports, ``typing.X[...]``, the defaults of parameters
the function never reads, and module-level dict
literals (lookup tables: their line runs at import whichever entry is used, so whether a
mutant there is reached cannot be told from the lines run).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider

ACTIVATIONS = {"relu": "gelu", "gelu": "relu", "sigmoid": "tanh", "tanh": "sigmoid", "softmax": "log_softmax",
               "log_softmax": "softmax", "silu": "relu", "swish": "relu", "elu": "relu", "selu": "elu",
               "softplus": "relu", "leaky_relu": "relu", "relu6": "relu", "hard_sigmoid": "sigmoid"}
REDUCTIONS = {"mean": "sum", "sum": "mean", "max": "min", "min": "max", "amax": "amin", "amin": "amax", "var": "std",
              "std": "var", "prod": "sum"}
ARITH = {cst.Add: cst.Subtract, cst.Subtract: cst.Add, cst.Multiply: cst.Divide, cst.Divide: cst.Multiply,
         cst.FloorDivide: cst.Divide, cst.Power: cst.Multiply}
COMPARE = {cst.LessThan: cst.LessThanEqual, cst.LessThanEqual: cst.LessThan, cst.GreaterThan: cst.GreaterThanEqual,
           cst.GreaterThanEqual: cst.GreaterThan, cst.Equal: cst.NotEqual, cst.NotEqual: cst.Equal}
MODE_KEYWORDS = {"training", "deterministic", "use_running_average", "train", "is_training"}
SQRTS = {"sqrt", "rsqrt"}
PERMUTES = {"transpose", "permute_dims"}
#: Flax keywords whose Flax default differs from Keras's (LeCun normal kernels, unit-normal
#: embeddings, against Glorot uniform and uniform(-0.05, 0.05)): a translation that drops
#: the written-out Keras default starts training elsewhere
INIT_KEYWORDS = {"kernel_init", "embedding_init", "recurrent_kernel_init", "depthwise_init", "pointwise_init"}
OPERATORS = ("arith", "compare", "constant", "off_by_one", "activation", "mode_flag", "axis", "sqrt_epsilon",
             "drop_term", "scale_output", "transpose", "reshape", "reduction", "default_arg", "loop_bound",
             "negation", "where_swap", "bool_op", "initializer")


@dataclass(frozen=True)
class Mutant:
    operator: str
    lines: tuple[int, int]  # first and last line of the node replaced
    description: str
    old: cst.CSTNode
    new: cst.CSTNode


def mutants(source: str) -> tuple[cst.Module, list[Mutant]]:
    """The module parsed, and every mutant of it in source order."""
    wrapper = MetadataWrapper(cst.parse_module(source))
    finder = _Finder(wrapper.module.code_for_node)
    wrapper.visit(finder)
    return wrapper.module, finder.found


def apply(module: cst.Module, mutant: Mutant) -> str:
    return module.deep_replace(mutant.old, mutant.new).code


def _int(value: int) -> cst.BaseExpression:
    return cst.Integer(str(value)) if value >= 0 else cst.UnaryOperation(cst.Minus(), cst.Integer(str(-value)))


def _literal_int(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and isinstance(node.expression, cst.Integer):
        return -int(node.expression.evaluated_value)
    return None


def _callee(node: cst.Call) -> str:
    func = node.func
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""


def _changed_float(node: cst.Float) -> cst.Float:
    value = float(node.evaluated_value)
    new = value * 100 if 0 < abs(value) < 1e-2 else value * 1.5 if value else 0.1
    return cst.Float(repr(new))


class _Finder(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, code_for_node):
        self.found: list[Mutant] = []
        self.code = code_for_node
        self.skip_depth = 0  # inside an annotation, an import, a decorator or a docstring-free zone
        self.functions: list[str] = []
        self.classes: list[str] = []
        self.defaults: set[int] = set()  # literals that are defaults: default_arg's, not off_by_one's

    def _add(self, operator: str, old: cst.CSTNode, new: cst.CSTNode, what: str = "") -> None:
        if self.skip_depth:
            return
        pos = self.get_metadata(PositionProvider, old)
        before = self.code(old).strip().splitlines()[0][:60]
        after = self.code(new).strip().splitlines()[0][:60]
        self.found.append(Mutant(operator, (pos.start.line, pos.end.line), what or f"{before} -> {after}", old, new))

    # -- zones no mutant belongs in ------------------------------------------------------
    def visit_Annotation(self, node) -> None:
        self.skip_depth += 1

    def leave_Annotation(self, node) -> None:
        self.skip_depth -= 1

    def visit_Decorator(self, node) -> None:
        self.skip_depth += 1

    def leave_Decorator(self, node) -> None:
        self.skip_depth -= 1

    def visit_Dict(self, node) -> None:
        # a module-level table (activation or initializer names): its line runs at import
        # whichever entries are looked up, so the line trace cannot tell a used entry
        self.skip_depth += not self.functions and not self.classes

    def leave_Dict(self, node) -> None:
        self.skip_depth -= not self.functions and not self.classes

    def visit_Import(self, node) -> bool:
        return False

    def visit_ImportFrom(self, node) -> bool:
        return False

    def visit_Subscript(self, node) -> None:  # typing.Tuple[int, ...] outside annotations
        self.skip_depth += isinstance(node.value, cst.Attribute) and self.code(node.value).startswith("typing.")

    def leave_Subscript(self, node) -> None:
        self.skip_depth -= isinstance(node.value, cst.Attribute) and self.code(node.value).startswith("typing.")

    def visit_ClassDef(self, node) -> None:
        self.classes.append(node.name.value)

    def leave_ClassDef(self, node) -> None:
        self.classes.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append(node.name.value)
        read = {n.value for n in m.findall(node.body, m.Name())}
        for param in [*node.params.params, *node.params.kwonly_params]:
            if param.name.value in read:  # a default the body never reads (``training`` of a layer without a mode) is no bug
                self._default(param, param.default, lambda new, p=param: p.with_changes(default=new))

    def leave_FunctionDef(self, node) -> None:
        self.functions.pop()

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:  # a Flax module's attribute default
        if not self.functions and node.value is not None:
            self._default(node, node.value, lambda new: node.with_changes(value=new))

    def _default(self, owner, value, rebuild) -> None:
        if value is None:
            return
        self.defaults.add(id(value))
        number = _literal_int(value)
        if isinstance(value, cst.Name) and value.value in {"True", "False"}:
            new = cst.Name("False" if value.value == "True" else "True")
        elif number is not None:
            new = _int(number + 1)
        elif isinstance(value, cst.Float):
            new = _changed_float(value)
        else:
            return
        self._add("default_arg", owner, rebuild(new), f"default {self.code(value)} -> {self.code(new)}")

    # -- expressions ---------------------------------------------------------------------
    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        swap = ARITH.get(type(node.operator))
        if swap is not None:
            self._add("arith", node, node.with_changes(operator=swap()))
        if isinstance(node.operator, (cst.Add, cst.Subtract)):
            self._add("drop_term", node, node.left.with_changes(lpar=node.lpar, rpar=node.rpar)
                      if hasattr(node.left, "lpar") else node.left)
            if isinstance(node.operator, cst.Add):
                self._add("drop_term", node, node.right.with_changes(lpar=node.lpar, rpar=node.rpar)
                          if hasattr(node.right, "lpar") else node.right)
            # sqrt(a) + eps  ->  sqrt(a + eps)
            left = node.left
            if isinstance(left, cst.Call) and _callee(left) in SQRTS and len(left.args) == 1 and isinstance(node.operator, cst.Add):
                inner = cst.BinaryOperation(left.args[0].value, cst.Add(), node.right)
                self._add("sqrt_epsilon", node, left.with_changes(args=[left.args[0].with_changes(value=inner)]))

    def visit_Comparison(self, node: cst.Comparison) -> None:
        for i, target in enumerate(node.comparisons):
            swap = COMPARE.get(type(target.operator))
            if swap is not None:
                targets = list(node.comparisons)
                targets[i] = target.with_changes(operator=swap())
                self._add("compare", node, node.with_changes(comparisons=targets))

    def visit_UnaryOperation(self, node: cst.UnaryOperation) -> None:
        if isinstance(node.operator, cst.Minus) and not isinstance(node.expression, (cst.Integer, cst.Float)):
            self._add("negation", node, node.expression)
        if isinstance(node.operator, cst.Not):
            self._add("mode_flag" if self._names_mode(node.expression) else "bool_op", node, node.expression)

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> None:
        swap = cst.Or() if isinstance(node.operator, cst.And) else cst.And()
        self._add("bool_op", node, node.with_changes(operator=swap))

    def visit_Integer(self, node: cst.Integer) -> None:
        if int(node.evaluated_value) != 0 and id(node) not in self.defaults:
            self._add("off_by_one", node, cst.Integer(str(int(node.evaluated_value) + 1)))

    def visit_Float(self, node: cst.Float) -> None:
        if id(node) not in self.defaults:
            self._add("constant", node, _changed_float(node))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        swap = ACTIVATIONS.get(node.attr.value)
        if swap is not None and self.code(node.value) in {"jax.nn", "nn", "jnp", "flax.linen", "linen", "jax.numpy"}:
            self._add("activation", node, node.with_changes(attr=cst.Name(swap)))

    def visit_Call(self, node: cst.Call) -> None:
        name = _callee(node)
        if name in REDUCTIONS and isinstance(node.func, cst.Attribute):
            self._add("reduction", node, node.with_changes(func=node.func.with_changes(attr=cst.Name(REDUCTIONS[name]))))
        if name in SQRTS and len(node.args) == 1:
            inner = node.args[0].value
            if isinstance(inner, cst.BinaryOperation) and isinstance(inner.operator, cst.Add):
                moved = cst.BinaryOperation(node.with_changes(args=[node.args[0].with_changes(value=inner.left)]), cst.Add(),
                                            inner.right)
                self._add("sqrt_epsilon", node, moved)
        if name in PERMUTES or name == "reshape":
            for i, arg in enumerate(node.args):
                value = arg.value
                if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) >= 2:
                    elements = list(value.elements)
                    if name == "reshape" and all(_literal_int(e.value) is not None for e in elements[-2:]):
                        continue  # swapping two literal sizes is often the same shape
                    elements[-1], elements[-2] = (elements[-2].with_changes(comma=elements[-1].comma),
                                                  elements[-1].with_changes(comma=elements[-2].comma))
                    args = list(node.args)
                    args[i] = arg.with_changes(value=value.with_changes(elements=elements))
                    self._add("transpose" if name in PERMUTES else "reshape", node, node.with_changes(args=args))
        if name == "range" and node.args:
            stop = node.args[0] if len(node.args) == 1 else node.args[1]
            changed = stop.with_changes(value=cst.BinaryOperation(stop.value, cst.Subtract(), cst.Integer("1")))
            self._add("loop_bound", node, node.deep_replace(stop, changed))
        if name == "fori_loop" and len(node.args) >= 2:
            stop = node.args[1]
            self._add("loop_bound", node, node.deep_replace(stop, stop.with_changes(
                value=cst.BinaryOperation(stop.value, cst.Subtract(), cst.Integer("1")))))
        if name == "where" and len(node.args) == 3:
            a, b = node.args[1], node.args[2]
            self._add("where_swap", node, node.with_changes(args=[node.args[0], b.with_changes(comma=a.comma),
                                                                  a.with_changes(comma=b.comma)]))
        for arg in node.args:
            keyword = arg.keyword.value if arg.keyword else ""
            if keyword == "axis" and (number := _literal_int(arg.value)) is not None:
                self._add("axis", node, node.deep_replace(arg, arg.with_changes(value=_int(number - 1 if number else 1))))
            if keyword in MODE_KEYWORDS:
                self._add("mode_flag", node, node.deep_replace(arg, arg.with_changes(value=_negated(arg.value))))
            if keyword in INIT_KEYWORDS and "lecun_normal" not in self.code(arg.value):
                self._add("initializer", node, node.with_changes(args=[a for a in node.args if a is not arg]),
                          f"{keyword}=... dropped: Flax's default instead")

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is None or not self.functions or (self.classes and self.functions[-1] != "__call__"):
            return  # outputs: of a layer's call or of a package function
        if isinstance(node.value, cst.Call) and _callee(node.value)[:1].isupper():
            return  # a factory's model: scaling it is a type error, not a plausible bug
        value = node.value
        if isinstance(value, cst.Tuple):
            for i, element in enumerate(value.elements):
                elements = list(value.elements)
                elements[i] = element.with_changes(value=_scaled(element.value))
                self._add("scale_output", node, node.with_changes(value=value.with_changes(elements=elements)),
                          f"return output {i} * 1.0001 in {self.functions[-1]}")
        elif not isinstance(value, (cst.Name, cst.Dict, cst.SimpleString)) or self._plain_name(value):
            self._add("scale_output", node, node.with_changes(value=_scaled(value)), f"return * 1.0001 in {self.functions[-1]}")

    @staticmethod
    def _plain_name(value) -> bool:
        return isinstance(value, cst.Name) and value.value not in {"None", "True", "False", "self"}

    @staticmethod
    def _names_mode(node) -> bool:
        return isinstance(node, cst.Name) and node.value in MODE_KEYWORDS or \
            isinstance(node, cst.Attribute) and node.attr.value in MODE_KEYWORDS


def _negated(value: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(value, cst.Name) and value.value in {"True", "False"}:
        return cst.Name("False" if value.value == "True" else "True")
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Not):
        return value.expression
    return cst.UnaryOperation(cst.Not(), value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                              if isinstance(value, cst.BinaryOperation | cst.BooleanOperation | cst.Comparison) else value)


def _scaled(value: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(value, (cst.BinaryOperation, cst.BooleanOperation, cst.Comparison, cst.IfExp, cst.Lambda)):
        value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.BinaryOperation(value, cst.Multiply(), cst.Float("1.0001"))
