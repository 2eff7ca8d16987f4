"""Generate the small ``nn.Module`` classes that stand in for Keras graph models."""

from __future__ import annotations

import re

import libcst as cst


def class_name_for(function_name: str, model_name: str | None = None) -> str:
    """``build_resnet`` -> ``Resnet``; a literal Keras ``name="tiny_unet"`` wins."""
    base = model_name or re.sub(r"^(build|make|create|get|new)_", "", function_name)
    parts = [p for p in re.split(r"[^0-9a-zA-Z]+", base) if p]
    name = "".join(p[:1].upper() + p[1:] for p in parts) or "Model"
    return name if name[0].isalpha() else f"Model{name}"


def compact_module(ctx, name: str, inputs: list[str], body: list[cst.BaseStatement], doc: str) -> cst.ClassDef:
    """``class <name>(nn.Module)`` with an ``@nn.compact __call__(self, <inputs>, training)``."""
    module = ctx.target_name("flax.linen.Module")
    compact = ctx.target_name("flax.linen.compact")
    params = [cst.Param(cst.Name("self"))] + [cst.Param(cst.Name(n)) for n in inputs]
    params.append(
        cst.Param(
            cst.Name("training"), annotation=cst.Annotation(cst.Name("bool")), default=cst.Name("False"),
            equal=cst.AssignEqual(cst.SimpleWhitespace(" "), cst.SimpleWhitespace(" ")),
        )
    )
    params = [
        p.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if i < len(params) - 1 else cst.MaybeSentinel.DEFAULT)
        for i, p in enumerate(params)
    ]
    call = cst.FunctionDef(
        name=cst.Name("__call__"),
        params=cst.Parameters(params),
        body=cst.IndentedBlock(body),
        decorators=[cst.Decorator(compact)],
    )
    docstring = cst.SimpleStatementLine([cst.Expr(cst.SimpleString(f'"""{doc}"""'))])
    return cst.ClassDef(
        name=cst.Name(name),
        bases=[cst.Arg(module)],
        body=cst.IndentedBlock([docstring, call]),
    )
