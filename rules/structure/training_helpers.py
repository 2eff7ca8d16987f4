"""Graph-building helper functions get the training flag Keras passed implicitly.

A helper like ``def residual_block(x, filters)`` that creates ``Dropout`` or
``BatchNormalization`` and calls them inside a functional model behaves, in Keras, as the
model's ``training`` flag says at call time. In Flax the flag must be explicit: the helper
gains ``training: bool = False`` (its layer calls then use it) and every call of a helper
from code that has a training flag passes it on. Helpers are found by the package pre-pass,
so calls from other modules of the package are covered too.
"""

from __future__ import annotations

import libcst as cst

from tern.rule import Rule


class TrainingHelpersRule(Rule):
    id = "structure:training-helpers"
    order = 25

    def visit_function(self, ctx, node):
        frame = ctx.frame
        if node.name.value in ctx.package.training_helpers and not frame.in_module_method and len(ctx.frames) == 1:
            frame.training = "training"
            frame.tags.add("training_helper")

    def leave_call(self, ctx, original, updated):
        frame = ctx.frame
        if frame is None or frame.training is None:
            return None
        if not (isinstance(original.func, cst.Name) and original.func.value in ctx.package.training_helpers):
            return None
        if any(a.keyword is not None and a.keyword.value == "training" for a in updated.args):
            return None
        args = list(updated.args)
        if args:
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(cst.Arg(cst.Name(frame.training), keyword=cst.Name("training"),
                            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
        return updated.with_changes(args=args)

    def leave_function(self, ctx, original, updated):
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


RULE = TrainingHelpersRule()
