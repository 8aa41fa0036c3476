# Copyright 2023-2026 the Berkeley Function Calling Leaderboard (Gorilla) authors
#
# Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
# compliance with the License. You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software distributed under the License is
# distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and limitations under the License.
#
# Vendored from bfcl-eval 2026.3.23, bfcl_eval/eval_checker/ast_eval/ast_checker.py
# (https://github.com/ShishirPatil/gorilla, berkeley-function-call-leaderboard), because that module
# imports every model handler (anthropic, openai, google, ...) at import time.
# Changes, all outside the decisions BFCL makes on its own data (tests/harness/test_agent.py checks
# 100% agreement with the upstream module on perturbed BFCL ground truth):
# - Python only, and no per-model name conversion (names compare exactly, as for a model whose
#   function names keep their dots);
# - JSON Schema type names ("object", "number") are read as BFCL's ("dict", "float"); a parameter
#   with no usable type, and a function with no description, are typed from the possible answers;
# - a missing "required" or "properties" is empty instead of a KeyError;
# - results carry one error string, not a list of nested error records.
"""BFCL's AST checker: does one decoded model output ([{name: {arg: value}}]) match the possible answers?"""
from __future__ import annotations

import re
from typing import Any

PYTHON_TYPE_MAPPING = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
# JSON Schema's names for BFCL's types (the tools of an OpenAI-style request use these)
JSON_SCHEMA_TYPES = {"object": "dict", "number": "float", "list": "array", "bool": "boolean"}

# This is the list of types that we need to recursively check its values
PYTHON_NESTED_TYPE_CHECK_LIST = ["array", "tuple"]


def _result(valid: bool, error: str = "", error_type: str = "", is_variable: bool = False) -> dict:
    return {"valid": valid, "error": error, "error_type": error_type, "is_variable": is_variable}


# --- types: BFCL's names, from a JSON Schema or inferred from the possible answers ----------------

def bfcl_type(schema: Any) -> str | None:
    """BFCL's name for the type a parameter schema declares, or None when it declares none we know."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if not isinstance(kind, str):
        return None
    kind = JSON_SCHEMA_TYPES.get(kind, kind)
    return kind if kind in PYTHON_TYPE_MAPPING else None


def _answer_type(options: Any) -> str | None:
    for option in options if isinstance(options, list) else [options]:
        if option == "":
            continue
        for python_type, name in ((bool, "boolean"), (int, "integer"), (float, "float"), (str, "string"),
                                  (list, "array"), (dict, "dict")):
            if type(option) is python_type:
                return name
        return None
    return None


def inferred_description(name: str, answers: dict) -> dict:
    """A function description for ``name`` typed from its possible answers: every argument known, each
    required unless ``""`` marks it optional."""
    properties = {}
    for param, options in answers.items():
        kind = _answer_type(options) or "any"
        schema: dict = {"type": kind}
        if kind == "array":
            first = next((o for o in options if isinstance(o, list) and o), None) if isinstance(options, list) \
                else None
            item = _answer_type(first[:1]) if first else None
            if item:
                schema["items"] = {"type": item}
        properties[param] = schema
    required = [p for p, options in answers.items() if not (isinstance(options, list) and "" in options)]
    return {"name": name, "parameters": {"type": "dict", "properties": properties, "required": required}}


# --- BFCL's checkers ------------------------------------------------------------------------------

def find_description(func_descriptions, name):
    if type(func_descriptions) == list:
        for func_description in func_descriptions:
            if func_description["name"] == name:
                return func_description
        return None
    else:
        # it is a dict, there is only one function
        return func_descriptions


def get_possible_answer_type(possible_answer: list):
    for answer in possible_answer:
        if answer != "":  # Optional parameter
            return type(answer)
    return None


def type_checker(param: str, value, possible_answer: list, expected_type_description: str,
                 expected_type_converted, nested_type_converted):
    # NOTE: This type checker only supports nested type checking for one level deep.
    result = _result(True, error_type="type_error:simple")
    is_variable = False
    # check for the case where a variable is used instead of a actual value.
    # use the type in possible_answer as the expected type
    possible_answer_type = get_possible_answer_type(possible_answer)
    # if possible_answer only contains optional parameters, we can't determine the type
    if possible_answer_type is not None:
        if possible_answer_type != expected_type_converted:
            is_variable = True

    # value is the same type as in function description
    if type(value) == expected_type_converted:
        # We don't need to do recursive check for simple types
        if nested_type_converted is None:
            result["is_variable"] = is_variable
            return result
        else:
            for possible_answer_item in possible_answer:
                flag = True  # Each parameter should match to at least one possible answer type.
                if type(possible_answer_item) == list:
                    for value_item in value:
                        checker_result = type_checker(param, value_item, possible_answer_item,
                                                      str(nested_type_converted), nested_type_converted, None)
                        if not checker_result["valid"]:
                            flag = False
                            break

                if flag:
                    return _result(True, is_variable=is_variable)

            result["valid"] = False
            result["error"] = (f"Nested type checking failed for parameter {param!r}. Expected outer type "
                               f"{expected_type_description} with inner type {nested_type_converted}.")
            result["error_type"] = "type_error:nested"

    # value is not as expected, check for the case where a variable is used instead of a actual value
    possible_answer_type = get_possible_answer_type(possible_answer)
    if possible_answer_type is not None:
        if type(value) == possible_answer_type:
            result["is_variable"] = True
            return result

    result["valid"] = False
    result["error"] = (f"Incorrect type for parameter {param!r}. Expected type {expected_type_description}, "
                       f"got {type(value).__name__}.")
    result["error_type"] = "type_error:simple"
    return result


def standardize_string(input_string: str):
    """Remove spaces and ",./-_*^", lowercase, and turn single quotes into double quotes, so that
    "April 1, 2024" and "april 1 2024" compare equal."""
    regex_string = r"[ \,\.\/\-\_\*\^]"
    return re.sub(regex_string, "", input_string).lower().replace("'", '"')


def string_checker(param: str, model_output: str, possible_answer: list):
    standardize_possible_answer = []
    standardize_model_output = standardize_string(model_output)
    for i in range(len(possible_answer)):
        if type(possible_answer[i]) == str:
            standardize_possible_answer.append(standardize_string(possible_answer[i]))

    if standardize_model_output not in standardize_possible_answer:
        return _result(False, f"Invalid value for parameter {param!r}: {_short(model_output)}. Expected one of "
                              f"{_short(possible_answer)}. Case insensitive.", "value_error:string")
    return _result(True)


def list_checker(param: str, model_output: list, possible_answer: list):
    standardize_model_output = list(model_output)

    # If the element in the list is a string, we need to standardize it
    for i in range(len(standardize_model_output)):
        if type(standardize_model_output[i]) == str:
            standardize_model_output[i] = standardize_string(model_output[i])

    standardize_possible_answer = []
    # We also need to standardize the possible answers
    for i in range(len(possible_answer)):
        standardize_possible_answer.append([])
        for j in range(len(possible_answer[i])):
            if type(possible_answer[i][j]) == str:
                standardize_possible_answer[i].append(standardize_string(possible_answer[i][j]))
            else:
                standardize_possible_answer[i].append(possible_answer[i][j])

    if standardize_model_output not in standardize_possible_answer:
        return _result(False, f"Invalid value for parameter {param!r}: {_short(model_output)}. Expected one of "
                              f"{_short(possible_answer)}.", "value_error:list/tuple")
    return _result(True)


def dict_checker(param: str, model_output: dict, possible_answers: list):
    # This function works for simple dictionaries, but not dictionaries with nested dictionaries.
    result = _result(False, error_type="dict_checker:unclear")
    for i in range(len(possible_answers)):
        if possible_answers[i] == "":
            continue

        result = _result(False, error_type="dict_checker:unclear")
        flag = True
        possible_answer = possible_answers[i]

        for key, value in model_output.items():
            if key not in possible_answer:
                result = _result(False, f"Unexpected dict key parameter: {_short(key)}.", "value_error:dict_key")
                flag = False
                break

            standardize_value = value
            # If the value is a string, we need to standardize it
            if type(value) == str:
                standardize_value = standardize_string(value)

            # We also need to standardize the possible answers if they are string
            standardize_possible_answer = []
            for j in range(len(possible_answer[key])):
                if type(possible_answer[key][j]) == str:
                    standardize_possible_answer.append(standardize_string(possible_answer[key][j]))
                else:
                    standardize_possible_answer.append(possible_answer[key][j])

            if standardize_value not in standardize_possible_answer:
                result = _result(False, f"Invalid value for parameter {_short(key)}: {_short(value)}. Expected one "
                                        f"of {_short(standardize_possible_answer)}.", "value_error:dict_value")
                flag = False
                break

        for key, value in possible_answer.items():
            if key not in model_output and "" not in value:
                result = _result(False, f"Missing dict key parameter: {key!r}.", "value_error:dict_key")
                flag = False
                break

        if flag:
            return _result(True)

    return result


def list_dict_checker(param: str, model_output: list, possible_answers: list):
    # Checks each dictionary of the list; their order must match the order of the possible answers
    result = _result(False, error_type="list_dict_checker:unclear")

    for answer_index in range(len(possible_answers)):
        flag = True  # True means so far, all dictionaries are valid

        if len(model_output) != len(possible_answers[answer_index]):
            result = _result(False, "Wrong number of dictionaries in the list.", "value_error:list_dict_count")
            flag = False
            continue

        for dict_index in range(len(model_output)):
            result = dict_checker(param, model_output[dict_index], [possible_answers[answer_index][dict_index]])
            if not result["valid"]:
                flag = False
                break
        if flag:
            return _result(True)

    return result


def simple_function_checker(func_description: dict, model_output: dict, possible_answer: dict):
    func_name, possible_answer = next(iter(possible_answer.items()))
    if func_description is None:
        func_description = inferred_description(func_name, possible_answer)
    parameters = func_description.get("parameters")
    parameters = parameters if isinstance(parameters, dict) else {}
    param_details = parameters.get("properties") if isinstance(parameters.get("properties"), dict) else {}
    required_params = parameters.get("required") if isinstance(parameters.get("required"), list) else []
    func_name = func_description.get("name", func_name)

    # Check if function name matches
    if func_name not in model_output:
        return _result(False, f"Function name {func_name!r} not found in model output.",
                       "simple_function_checker:wrong_func_name")

    model_params = model_output[func_name]

    # Check for required parameters in model output
    for param in required_params:
        if param not in model_params:
            return _result(False, f"Missing required parameter: {param!r}.",
                           "simple_function_checker:missing_required")

    # Validate types and values for each parameter in model output
    for param, value in model_params.items():
        if param not in param_details or param not in possible_answer:
            return _result(False, f"Unexpected parameter: {_short(param)}.",
                           "simple_function_checker:unexpected_param")

        full_param_details = param_details[param]
        expected_type_description = bfcl_type(full_param_details) or _answer_type(possible_answer[param]) or "any"
        nested_type_converted = None

        expected_type_converted = PYTHON_TYPE_MAPPING[expected_type_description]
        if expected_type_description in PYTHON_NESTED_TYPE_CHECK_LIST:
            nested_type = bfcl_type(full_param_details.get("items"))
            nested_type_converted = PYTHON_TYPE_MAPPING[nested_type] if nested_type else None

        # BFCL turns a tuple into a list when the expected type is tuple (JSON has no tuples)
        if expected_type_description == "tuple" and type(value) == tuple:
            value = list(value)

        # Allow python auto conversion from int to float
        if expected_type_description == "float" and type(value) == int:
            value = float(value)

        type_check_result = type_checker(param, value, possible_answer[param], expected_type_description,
                                         expected_type_converted, nested_type_converted)
        is_variable = type_check_result["is_variable"]
        if not type_check_result["valid"]:
            return type_check_result

        # A variable is treated as a string in the normal flow below
        if not is_variable:
            # Special handle for dictionaries
            if expected_type_converted == dict:
                result = dict_checker(param, value, possible_answer[param])
                if not result["valid"]:
                    return result
                continue

            # Special handle for list of dictionaries
            elif expected_type_converted == list and nested_type_converted == dict:
                result = list_dict_checker(param, value, possible_answer[param])
                if not result["valid"]:
                    return result
                continue

            # Special handle for strings
            elif expected_type_converted == str:
                # We don't check for case sensitivity for string, as long as it's not a variable
                result = string_checker(param, value, possible_answer[param])
                if not result["valid"]:
                    return result
                continue

            elif expected_type_converted == list:
                result = list_checker(param, value, possible_answer[param])
                if not result["valid"]:
                    return result
                continue

        # Check if the value is within the possible answers
        if value not in possible_answer[param]:
            return _result(False, f"Invalid value for parameter {param!r}: {_short(value)}. Expected one of "
                                  f"{_short(possible_answer[param])}.", "value_error:others")

    # Check for optional parameters not provided but allowed
    for param in possible_answer:
        if param not in model_params and "" not in possible_answer[param]:
            return _result(False, f"Optional parameter {param!r} not provided and not marked as optional.",
                           "simple_function_checker:missing_optional")

    return _result(True)


def parallel_function_checker_no_order(func_descriptions: list, model_output: list, possible_answers: list):
    if len(model_output) != len(possible_answers):
        return _result(False, f"Wrong number of functions: expected {len(possible_answers)}, got "
                              f"{len(model_output)}.", "parallel_function_checker_no_order:wrong_count")

    matched_indices = []
    # Each possible answer, in order, takes the first unmatched model call that matches it (greedy, as BFCL)
    result = _result(True)
    for i in range(len(possible_answers)):
        func_name_expected = next(iter(possible_answers[i]))
        func_description = find_description(func_descriptions, func_name_expected)
        errors = []
        for index in range(len(model_output)):
            if index in matched_indices:
                continue
            result = simple_function_checker(func_description, model_output[index], possible_answers[i])
            if result["valid"]:
                matched_indices.append(index)
                break
            errors.append(f"call {index}: {result['error']}")

        if not result["valid"]:
            return _result(False, f"No call matches expected call {i} ({func_name_expected}): " + " ".join(errors),
                           "parallel_function_checker_no_order:cannot_find_match")

    return _result(True)


def multiple_function_checker(func_descriptions: list, model_output: list, possible_answers: list):
    if len(model_output) != len(possible_answers):
        return _result(False, f"Wrong number of functions: expected {len(possible_answers)}, got "
                              f"{len(model_output)}.", "multiple_function_checker:wrong_count")

    # possible_answers is a list of only one dictionary with only one key
    func_name_expected = next(iter(possible_answers[0]))
    func_description = find_description(func_descriptions, func_name_expected)
    return simple_function_checker(func_description, model_output[0], possible_answers[0])


def _short(value: Any, limit: int = 120) -> str:
    """repr(value) cut to ``limit`` characters: a reason must not repeat a megabyte of model output."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
