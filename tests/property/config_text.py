"""config.pbtxt text as careless hands write it: any ModelConfig fields with right or wrong values, junk tokens,
and damaged copies of real configs. Enum numbers stay inside each enum (an unknown number: test_findings.py)."""

from __future__ import annotations

from google.protobuf import descriptor as pbd
from hypothesis import strategies as st
from tritonclient.grpc import model_config_pb2 as mc

from tests.integration.runtime import repo
from tests.property.plans import CHARS

FD = pbd.FieldDescriptor
JUNK = st.sampled_from(["{", "}", "[", "]", ":", ",", '"', "'", "#", "<", ">", "-", "\\", "\n", "\u00e9", "\x00", "1e999"])
INTS = st.integers(-(2**64), 2**64) | st.integers(-3, 20)
NUMBER_KINDS = (FD.CPPTYPE_INT32, FD.CPPTYPE_INT64, FD.CPPTYPE_UINT32, FD.CPPTYPE_UINT64)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@st.composite
def _scalar(draw: st.DrawFn, field: pbd.FieldDescriptor) -> str:
    if draw(st.integers(0, 9)) == 0:  # a value of the wrong kind
        return draw(st.sampled_from(["true", '"x"', "1.5", "-1", "TYPE_FP32", "{}", "[]", "nan"]))
    if field.enum_type is not None:
        values = field.enum_type.values
        return draw(st.sampled_from([v.name for v in values]) | st.sampled_from([str(v.number) for v in values]))
    if field.cpp_type in NUMBER_KINDS:
        return str(draw(INTS))
    if field.cpp_type in (FD.CPPTYPE_FLOAT, FD.CPPTYPE_DOUBLE):
        return draw(st.sampled_from(["0.5", "-1e30", "inf", "1e400", "3"]))
    if field.cpp_type == FD.CPPTYPE_BOOL:
        return draw(st.sampled_from(["true", "false", "1", "0", "True"]))
    return _quoted(draw(st.text(CHARS, max_size=12)))


@st.composite
def message_text(draw: st.DrawFn, descriptor: pbd.Descriptor, depth: int = 0) -> str:
    parts: list[str] = []
    fields = list(descriptor.fields)
    if not fields:
        return ""
    for field in draw(st.lists(st.sampled_from(fields), max_size=6 if depth == 0 else 3)):
        if field.message_type is not None:
            if depth >= 3:
                continue
            if field.message_type.GetOptions().map_entry:
                key = field.message_type.fields_by_name["key"]
                value = field.message_type.fields_by_name["value"]
                inner = (f"key: {draw(_scalar(key))} value "
                         + (f"{{ {draw(message_text(value.message_type, depth + 1))} }}" if value.message_type
                            else f": {draw(_scalar(value))}"))
                parts.append(f"{field.name} {{ {inner} }}")
            elif field.is_repeated and draw(st.booleans()):
                items = draw(st.lists(message_text(field.message_type, depth + 1), max_size=3))
                parts.append(f"{field.name} [ " + ", ".join(f"{{ {i} }}" for i in items) + " ]")
            else:
                parts.append(f"{field.name} {{ {draw(message_text(field.message_type, depth + 1))} }}")
        elif field.is_repeated and draw(st.booleans()):
            parts.append(f"{field.name}: [ " + ", ".join(draw(st.lists(_scalar(field), max_size=4))) + " ]")
        else:
            parts.append(f"{field.name}: {draw(_scalar(field))}")
        if draw(st.integers(0, 19)) == 0:
            parts.append(draw(JUNK))
    return " ".join(parts)


REAL = [repo.ADD_SUB_CONFIG, repo.PY_ADD_SUB_CONFIG, repo.PY_FAIL_CONFIG, repo.VERSIONED_CONFIG]


@st.composite
def damaged_real_config(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(REAL))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["cut", "insert", "duplicate"]))
        if action == "cut":
            text = text[:at] + text[at + draw(st.integers(1, 20)) :]
        elif action == "insert":
            text = text[:at] + draw(JUNK | st.text(CHARS, max_size=5)) + text[at:]
        else:
            text = text[:at] + text[at : at + draw(st.integers(1, 40))] + text[at:]
    return text


@st.composite
def plausible_config(draw: st.DrawFn) -> str:
    """A config most of which is right: a known backend, then generated tensors and other fields."""
    head = f'name: "m" backend: "{draw(st.sampled_from(["python", "onnxruntime"]))}" '
    head += f"max_batch_size: {draw(st.integers(-1, 9))} "
    types = [v.name for v in mc.DataType.DESCRIPTOR.values]

    @st.composite
    def tensor(draw: st.DrawFn, descriptor: pbd.Descriptor) -> str:
        dims = draw(st.lists(st.integers(-2, 5), max_size=3))
        extra = draw(message_text(descriptor, 2)) if draw(st.integers(0, 3)) == 0 else ""
        return (f'{{ name: "{draw(st.sampled_from(["a", "b", "c"]))}" data_type: {draw(st.sampled_from(types))} '
                f"dims: [ {', '.join(map(str, dims))} ] {extra} }}")

    tensors = [
        f"{kind} [ " + ", ".join(draw(st.lists(tensor(descriptor), min_size=1, max_size=3))) + " ]"
        for kind, descriptor in (("input", mc.ModelInput.DESCRIPTOR), ("output", mc.ModelOutput.DESCRIPTOR))
    ]
    rest = draw(message_text(mc.ModelConfig.DESCRIPTOR, 2)) if draw(st.integers(0, 2)) == 0 else ""
    return head + " ".join(tensors) + " " + rest


CONFIG_TEXT = (message_text(mc.ModelConfig.DESCRIPTOR) | damaged_real_config() | plausible_config()
               | st.text(CHARS, max_size=200))
