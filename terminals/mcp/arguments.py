"""Tool arguments a tool does not take are refused, on every profile, naming the one probably meant.

The SDK validates a call's arguments with a pydantic model made from the tool function's signature, and pydantic
ignores names it does not know: {"cwdir": "/srv"} would start a terminal in the home directory as if obeyed. Each
tool's model is swapped, once its server is built, for one that refuses them; the published input schema says
the same ("additionalProperties": false) and keeps its properties and required names, the profiles' contracts.
Only the top level is checked: komodo's nested options objects keep the SDK's (lenient) models.
"""

from __future__ import annotations

from pydantic import ConfigDict, model_validator

from .. import field_names


def refuse_unknown_arguments(server) -> None:
    """Makes every tool of this MCPServer refuse arguments it does not take."""
    for tool in server._tool_manager.list_tools():  # the SDK offers no public way to reach a tool's argument model
        tool.fn_metadata.arg_model = _strict(tool.fn_metadata.arg_model, tool.name)
        tool.parameters["additionalProperties"] = False


def _strict(model: type, tool_name: str) -> type:
    accepted = frozenset(field.alias or name for name, field in model.model_fields.items())

    def known_only(cls, data):
        if isinstance(data, dict):
            names = field_names.unknown(data, accepted)
            if names:
                raise ValueError(field_names.problem(names[0], accepted, "argument"))
        return data

    # hide_input_in_errors: the refusal quotes the name only, not the whole of the caller's arguments.
    namespace = {"model_config": ConfigDict(**model.model_config, hide_input_in_errors=True),
                 "known_only": model_validator(mode="before")(classmethod(known_only))}
    return type(model.__name__, (model,), namespace)
