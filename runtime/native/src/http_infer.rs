//! The common shapes of a KServe v2 HTTP infer body, read here without the GIL: a JSON header whose inputs carry
//! their data as binary (`binary_data_size`) after it, or as JSON `data` arrays (crate::json_tensors), and
//! outputs that name no shared memory.
//!
//! This is a fast path, not a second decoder: [`binary_request`] answers `Some` only for a body the Python
//! decoder (`http_codec.decode_infer_request`) reads into the same request, with every structural check it
//! makes already passed. Anything else (a JSON value Python reads its own way, shared memory, an unusual
//! number, any error at all) is `None`, and Python decodes the body as before, with its own messages. An input
//! whose JSON `data` the core read is handed over as if it had been sent as binary data: its values'
//! little-endian bytes. What is left to Python on this path are the checks of a tensor against its bytes
//! (`dtypes.tensor_from_raw`), the same calls in the same order.
//!
//! An input's `data` is kept as its raw JSON text while the header is read (checked, not turned into values),
//! then read by crate::json_tensors: a large JSON tensor costs its bytes once, never a value per number.

use std::fmt;
use std::marker::PhantomData;

use bytes::Bytes;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};

use crate::json_tensors::read_values;

/// A header longer than this is read on a blocking thread, not in the connection's task (crate::http).
pub const INLINE_HEADER: usize = 64 * 1024;
/// The wire datatypes the Python decoder accepts (`http_codec._DATATYPES`: numpy has no BF16).
pub const DATATYPES: [&str; 13] = [
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16",
    "FP32", "FP64", "BYTES",
];
/// Beyond this a JSON float may have been written as an integer, which Python keeps exact: not ours to read.
const EXACT_FLOAT: f64 = 9_007_199_254_740_992.0; // 2**53

/// A JSON object's members as values, but for one (`key`), read as `T` (an input's `data`: its raw text, checked,
/// not turned into values); a repeated key's last value counts, as in a Python dict built from JSON.
struct Split<T> {
    values: Map<String, Value>,
    special: Option<T>,
}

/// An input: its members but `data`, as values, and its `data` as raw JSON text.
type Members<'a> = Split<&'a RawValue>;
/// The header: its members but `inputs`, as values, and its inputs (none: absent or null), read in one pass.
type Header<'a> = Split<Option<Vec<Members<'a>>>>;

struct SplitOn<T> {
    key: &'static str,
    read: PhantomData<T>,
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for SplitOn<T> {
    type Value = Split<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Split<T>, A::Error> {
        let mut values = Map::new();
        let mut special = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.key {
                special = Some(map.next_value::<T>()?);
            } else {
                let value: Value = map.next_value()?;
                values.insert(key, value);
            }
        }
        Ok(Split { values, special })
    }
}

fn split_on<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    deserializer: D,
    key: &'static str,
) -> Result<Split<T>, D::Error> {
    deserializer.deserialize_map(SplitOn {
        key,
        read: PhantomData,
    })
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        split_on(deserializer, "data")
    }
}

/// A parameter's value as Python's `json` reads it.
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(String),
}

/// Parameters in the order they were written (a repeated key keeps its first place and its last value, as
/// a Python dict built from JSON does).
pub type Params = Vec<(String, Scalar)>;

#[derive(Debug)]
pub struct BinaryInput {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    /// Its bytes of the body, not copied; or, where it came as JSON `data`, its values' little-endian bytes.
    pub data: Bytes,
}

#[derive(Debug)]
pub struct BinaryOutput {
    pub name: String,
    pub parameters: Params,
}

#[derive(Debug)]
pub struct BinaryRequest {
    pub id: String,
    /// Without `binary_data_output`, which is `binary_default`.
    pub parameters: Params,
    pub binary_default: bool,
    pub inputs: Vec<BinaryInput>,
    pub outputs: Vec<BinaryOutput>,
}

/// The `Inference-Header-Content-Length` as plain decimal digits (Python's `int` takes more: those go there).
pub fn header_length(value: Option<&str>, body: usize) -> Option<usize> {
    match value {
        None => Some(body),
        Some(text) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
            text.parse::<usize>().ok().filter(|n| *n <= body)
        }
        Some(_) => None,
    }
}

fn scalar(value: &Value) -> Option<Scalar> {
    Some(match value {
        Value::Bool(b) => Scalar::Bool(*b),
        Value::String(s) => Scalar::Str(s.clone()),
        Value::Number(n) => number(n)?,
        _ => return None,
    })
}

fn number(n: &Number) -> Option<Scalar> {
    if let Some(v) = n.as_i64() {
        return Some(Scalar::Int(v));
    }
    if let Some(v) = n.as_u64() {
        return Some(Scalar::Uint(v));
    }
    let v = n.as_f64()?;
    (v.is_finite() && v.abs() < EXACT_FLOAT).then_some(Scalar::Float(v))
}

/// A `parameters` member: absent or null is none; otherwise an object of scalars, none of them naming shared
/// memory.
fn params(raw: Option<&Value>) -> Option<Params> {
    let object = match raw {
        None | Some(Value::Null) => return Some(Vec::new()),
        Some(Value::Object(object)) => object,
        Some(_) => return None,
    };
    object
        .iter()
        .map(|(key, value)| {
            if key.starts_with("shared_memory_") {
                return None;
            }
            Some((key.clone(), scalar(value)?))
        })
        .collect()
}

fn name(item: &Map<String, Value>) -> Option<String> {
    match item.get("name") {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

fn take(parameters: &mut Params, key: &str) -> Option<Scalar> {
    let at = parameters.iter().position(|(k, _)| k == key)?;
    Some(parameters.remove(at).1)
}

fn input(raw: &Members<'_>, binary: &Bytes, offset: usize) -> Option<BinaryInput> {
    let item = &raw.values;
    let name = name(item)?;
    let datatype = match item.get("datatype") {
        Some(Value::String(s)) if DATATYPES.contains(&s.as_str()) => s.clone(),
        _ => return None,
    };
    let shape = match item.get("shape") {
        Some(Value::Array(dims)) => dims.iter().map(Value::as_i64).collect::<Option<Vec<_>>>()?,
        _ => return None,
    };
    let parameters = params(item.get("parameters"))?;
    let size = parameters.iter().find(|(k, _)| k == "binary_data_size");
    if let Some(data) = raw.special {
        if size.is_some() {
            return None; // both: Python's to refuse
        }
        let count = shape
            .iter()
            .try_fold(1usize, |n, d| n.checked_mul(usize::try_from(*d).ok()?))?;
        let values = read_values(data.get(), &datatype, count)?;
        return Some(BinaryInput {
            name,
            datatype,
            shape,
            data: Bytes::from(values),
        });
    }
    let size = match size?.1 {
        Scalar::Int(n) if n >= 0 => n as usize,
        Scalar::Uint(n) => usize::try_from(n).ok()?,
        _ => return None,
    };
    let end = offset
        .checked_add(size)
        .filter(|end| *end <= binary.len())?;
    Some(BinaryInput {
        name,
        datatype,
        shape,
        data: binary.slice(offset..end),
    })
}

fn output(raw: &Value) -> Option<BinaryOutput> {
    let item = raw.as_object()?;
    let name = name(item)?;
    let parameters = params(item.get("parameters"))?;
    if let Some((_, value)) = parameters.iter().find(|(k, _)| k == "binary_data") {
        if !matches!(value, Scalar::Bool(_)) {
            return None;
        }
    }
    Some(BinaryOutput { name, parameters })
}

/// The request, when `body` has one of the common shapes and Python would read it without an error of its
/// own structure (see the module's note); `None` leaves the body to Python.
pub fn binary_request(header_length_value: Option<&str>, body: &Bytes) -> Option<BinaryRequest> {
    let length = header_length(header_length_value, body.len())?;
    if length == 0 {
        return None;
    }
    let mut reader = serde_json::Deserializer::from_slice(&body[..length]);
    let header: Header<'_> = split_on(&mut reader, "inputs").ok()?;
    reader.end().ok()?; // nothing but whitespace after the object
    let Split {
        values: header,
        special: entries,
    } = header;
    let binary = body.slice(length..);
    let id = match header.get("id") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return None,
    };
    let mut parameters = params(header.get("parameters"))?;
    let binary_default = match take(&mut parameters, "binary_data_output") {
        None => false,
        Some(Scalar::Bool(b)) => b,
        Some(_) => return None,
    };
    let mut inputs: Vec<BinaryInput> = Vec::new();
    let mut offset = 0;
    for raw in &entries.flatten()? {
        let from_body = raw.special.is_none();
        let tensor = input(raw, &binary, offset)?;
        if inputs.iter().any(|seen| seen.name == tensor.name) {
            return None;
        }
        if from_body {
            offset += tensor.data.len();
        }
        inputs.push(tensor);
    }
    if offset != binary.len() {
        return None;
    }
    let mut outputs: Vec<BinaryOutput> = Vec::new();
    match header.get("outputs") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for raw in items {
                let tensor = output(raw)?;
                if outputs.iter().any(|seen| seen.name == tensor.name) {
                    return None;
                }
                outputs.push(tensor);
            }
        }
        Some(_) => return None,
    }
    Some(BinaryRequest {
        id,
        parameters,
        binary_default,
        inputs,
        outputs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(header: &str, binary: &[u8]) -> (String, Bytes) {
        let mut all = header.as_bytes().to_vec();
        all.extend_from_slice(binary);
        (header.len().to_string(), Bytes::from(all))
    }

    const PERF: &str = r#"{"inputs":[{"name":"X","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}],"outputs":[{"name":"Y","parameters":{"binary_data":true}}]}"#;

    #[test]
    fn reads_a_binary_request_and_slices_its_tensors() {
        let (length, all) = body(PERF, &[7u8; 16]);
        let request = binary_request(Some(&length), &all).expect("the common shape");
        assert_eq!(request.id, "");
        assert!(request.parameters.is_empty() && !request.binary_default);
        let x = &request.inputs[0];
        assert_eq!(
            (x.name.as_str(), x.datatype.as_str(), x.shape.clone()),
            ("X", "FP32", vec![1, 4])
        );
        assert_eq!(&x.data[..], &[7u8; 16]);
        assert_eq!(request.outputs[0].name, "Y");
        assert_eq!(
            request.outputs[0].parameters,
            vec![("binary_data".into(), Scalar::Bool(true))]
        );
    }

    #[test]
    fn keeps_parameters_in_order_without_binary_data_output() {
        let header = r#"{"id":"r1","parameters":{"z":1,"binary_data_output":true,"a":"s","f":0.5,"u":18446744073709551615,"z":2},"inputs":[]}"#;
        let (length, all) = body(header, b"");
        let request = binary_request(Some(&length), &all).expect("read");
        assert_eq!(request.id, "r1");
        assert!(request.binary_default);
        let expected = vec![
            ("z".to_string(), Scalar::Int(2)),
            ("a".to_string(), Scalar::Str("s".into())),
            ("f".to_string(), Scalar::Float(0.5)),
            ("u".to_string(), Scalar::Uint(u64::MAX)),
        ];
        assert_eq!(request.parameters, expected);
    }

    #[test]
    fn leaves_everything_else_to_python() {
        let binary = [0u8; 16];
        let refused = [
            // JSON data and a size, JSON data and binary data no input claims, JSON data the wrong length, a
            // number among JSON BYTES, shared memory, a missing size
            r#"{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","data":[1,2,3,4],"parameters":{"binary_data_size":16}}]}"#,
            r#"{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","data":[1,2,3,4]}]}"#,
            r#"{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}},{"name":"Y","shape":[2],"datatype":"INT8","data":[1]}]}"#,
            r#"{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}},{"name":"Y","shape":[2],"datatype":"BYTES","data":["a",1]}]}"#,
            r#"{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","parameters":{"shared_memory_region":"r","binary_data_size":16}}]}"#,
            r#"{"inputs":[{"name":"X","shape":[4],"datatype":"FP32"}]}"#,
            r#"{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}}],"outputs":[{"name":"Y","parameters":{"shared_memory_region":"r"}}]}"#,
            // what Python refuses with its own message
            r#"{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16.0}}]}"#,
            r#"{"inputs":[{"name":"X","shape":[4],"datatype":"BF16","parameters":{"binary_data_size":16}}]}"#,
            r#"{"inputs":[{"name":"X","shape":[true],"datatype":"FP32","parameters":{"binary_data_size":16}}]}"#,
            r#"{"inputs":[{"name":"","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}"#,
            r#"{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":8}}]}"#,
            r#"{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":32}}]}"#,
            r#"{"inputs":[{"name":"X","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}},{"name":"X","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}}]}"#,
            r#"{"id":3,"inputs":[{"name":"X","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}"#,
            r#"{"parameters":{"binary_data_output":1},"inputs":[{"name":"X","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}"#,
            r#"{"parameters":{"p":[1]},"inputs":[{"name":"X","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}"#,
            r#"{"parameters":{"p":123456789012345678901234567890},"inputs":[{"name":"X","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}"#,
            r#"{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}}],"outputs":[{"name":"Y","parameters":{"binary_data":1}}]}"#,
            r#"{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}}],"outputs":[{"name":"Y"},{"name":"Y"}]}"#,
            r#"{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}}],"outputs":{}}"#,
            r#"{"inputs":{}}"#,
            r#"{"inputs":[]} []"#,
            r#"[]"#,
            r#"{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}}]"#,
            "{\"id\":\"\\ud800\",\"inputs\":[{\"name\":\"X\",\"shape\":[4],\"datatype\":\"FP32\",\"parameters\":{\"binary_data_size\":16}}]}",
            "\u{feff}{\"inputs\":[{\"name\":\"X\",\"shape\":[4],\"datatype\":\"FP32\",\"parameters\":{\"binary_data_size\":16}}]}",
        ];
        for header in refused {
            let (length, all) = body(header, &binary);
            assert!(
                binary_request(Some(&length), &all).is_none(),
                "took {header}"
            );
        }
    }

    #[test]
    fn reads_the_header_length_as_python_would_or_not_at_all() {
        let (_, all) = body(PERF, &[0u8; 16]);
        for bad in ["", "+161", " 161", "1_0", "-1", "99999", "١٢"] {
            assert!(binary_request(Some(bad), &all).is_none(), "took {bad:?}");
        }
        let header = r#"{"inputs":[{"name":"X","shape":[0],"datatype":"FP32","parameters":{"binary_data_size":0}}]}"#;
        let all_json = Bytes::from(header.as_bytes().to_vec());
        assert!(binary_request(None, &all_json).is_some());
    }

    #[test]
    fn reads_json_data_beside_binary_data_as_its_values_bytes() {
        let header = r#"{"inputs":[{"name":"A","shape":[2,2],"datatype":"INT16","data":[[1,-2],[3,4]]},{"name":"X","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}},{"name":"B","shape":[1],"datatype":"BOOL","data":[true],"data":[false]}]}"#;
        let (length, all) = body(header, &[9u8; 4]);
        let request = binary_request(Some(&length), &all).expect("read");
        let a: Vec<u8> = [1i16, -2, 3, 4]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(&request.inputs[0].data[..], &a[..]);
        assert_eq!(request.inputs[0].shape, vec![2, 2]);
        assert_eq!(&request.inputs[1].data[..], &[9u8; 4]);
        assert_eq!(
            &request.inputs[2].data[..],
            &[0u8],
            "the last of a repeated member"
        );
    }

    #[test]
    fn reads_a_large_header() {
        let pad = " ".repeat(4 * INLINE_HEADER);
        let (length, all) = body(&format!("{PERF}{pad}"), &[0u8; 16]);
        assert!(binary_request(Some(&length), &all).is_some());
    }
}
