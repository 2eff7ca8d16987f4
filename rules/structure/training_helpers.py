"""Graph-building helper functions get the training flag Keras passed implicitly.

A helper like ``def residual_block(x, filters)`` that creates ``Dropout`` or
``BatchNormalization`` and calls them inside a functional model behaves, in Keras, as the
model's ``training`` flag says at call time. In Flax the flag must be explicit: the helper
gains ``training: bool = False`` (its layer calls then use it) and every call of a helper
from code that has a training flag passes it on. Helpers are found by the package pre-pass,
so calls from other modules of the package are covered too, and so is a function that only
calls helpers (a stage of blocks). A closure a helper returns (``def apply(x)``, the way
keras-cv writes its blocks) reads the helper's flag; a parameter whose default is a helper
(``down_block=DownSampleBlock``) is called as one: a block given in its place must take the
flag too, or the call fails loudly.
"""

from __future__ import annotations

import libcst as cst

from tern.engine.rule import Rule


class TrainingHelpersRule(Rule):
    id = "structure:training-helpers"
    order = 25

    def visit_function(self, ctx, node):
        frame = ctx.frame
        defaults = {p.name.value for p in (*node.params.params, *node.params.kwonly_params)
                    if isinstance(p.default, cst.Name) and p.default.value in ctx.package.training_helpers}
        if defaults:  # ``down_block=DownSampleBlock``: a block given as a parameter, a helper by default
            ctx.rule_state.setdefault("helper_params", {})[id(frame)] = defaults
        if node.name.value in ctx.package.training_helpers and not frame.in_module_method and len(ctx.frames) == 1:
            frame.training = "training"
            frame.tags.add("training_helper")
        elif (len(ctx.frames) > 1 and frame.training is None and ctx.frames[-2].training is not None
              and not frame.in_module_method and not _has_param(node, ctx.frames[-2].training)):
            # a closure the helper returns (``def apply(x)`` in keras-cv's blocks) reads the
            # helper's flag; without it, its layers would be fixed in inference mode
            frame.training = ctx.frames[-2].training

    def leave_call(self, ctx, original, updated):
        frame = ctx.frame
        if frame is None or frame.training is None:
            return None
        if not isinstance(original.func, cst.Name):
            return None
        given = ctx.rule_state.get("helper_params", {})
        as_parameter = any(original.func.value in given.get(id(f), ()) for f in ctx.frames)
        if original.func.value not in ctx.package.training_helpers and not as_parameter:
            return None
        return None if passes_training(updated) else with_training(updated, frame.training)

    def leave_function(self, ctx, original, updated):
        ctx.rule_state.get("helper_params", {}).pop(id(ctx.frame), None)  # ids are reused once a frame is gone
        if "training_helper" not in ctx.frame.tags:
            return None
        params = updated.params
        new = cst.Param(
            cst.Name("training"), annotation=cst.Annotation(cst.Name("bool")), default=cst.Name("False"),
            equal=cst.AssignEqual(cst.SimpleWhitespace(" "), cst.SimpleWhitespace(" ")),
        )
        if params.star_arg is not cst.MaybeSentinel.DEFAULT or params.star_kwarg is not None:
            kwonly = [*params.kwonly_params, new]
            return updated.with_changes(params=params.with_changes(kwonly_params=kwonly))
        plist = list(params.params)
        if plist:
            plist[-1] = plist[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return updated.with_changes(params=params.with_changes(params=[*plist, new]))


def passes_training(call: cst.Call) -> bool:
    return any(a.keyword is not None and a.keyword.value == "training" for a in call.args)


def with_training(call: cst.Call, flag: str) -> cst.Call:
    """``f(x)`` -> ``f(x, training=flag)``."""
    args = list(call.args)
    if args:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.append(cst.Arg(cst.Name(flag), keyword=cst.Name("training"),
                        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
    return call.with_changes(args=args)


def _has_param(node: cst.FunctionDef, name: str) -> bool:
    params = node.params
    return any(p.name.value == name for p in (*params.params, *params.kwonly_params, *params.posonly_params))


RULE = TrainingHelpersRule()
