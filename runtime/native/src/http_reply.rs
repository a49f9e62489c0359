//! The JSON header of an infer answer, its outputs following it as binary data or written in it as JSON `data`
//! arrays, byte for byte as the Python encoder (`http_codec.encode_infer_parts`, standard JSON, ASCII only)
//! writes it, so that both paths answer alike. Values it cannot write exactly (a float parameter, NaN) are the
//! caller's to leave to Python.

use std::fmt::Write;

use crate::json_tensors::write_values;

/// A response parameter's value.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplyValue {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Str(String),
}

/// Where an output's data goes.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplyData {
    /// After the header, this many bytes of it.
    Binary(usize),
    /// In the header as `data`, from the values the writer is given for the output.
    Values,
    /// In the header as `data`: a BYTES output's elements, as text.
    Texts(Vec<String>),
}

/// One output: name, datatype, shape, and where its data goes.
#[derive(Clone, Debug)]
pub struct ReplyOutput {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    pub data: ReplyData,
}

#[derive(Clone, Debug)]
pub struct ReplyHead {
    pub model_name: String,
    pub model_version: String,
    /// Written only when not empty.
    pub id: String,
    /// Written only when not empty.
    pub parameters: Vec<(String, ReplyValue)>,
    pub outputs: Vec<ReplyOutput>,
}

/// `text` as a JSON string, as Python's `json` writes it with `ensure_ascii`: printable ASCII as it is, `"`
/// and `\` and the five short control escapes escaped, everything else as `\uXXXX` (lower-case hex; a
/// surrogate pair beyond the BMP).
pub fn ascii_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

fn value(out: &mut String, v: &ReplyValue) {
    match v {
        ReplyValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        ReplyValue::Int(n) => {
            let _ = write!(out, "{n}");
        }
        ReplyValue::Uint(n) => {
            let _ = write!(out, "{n}");
        }
        ReplyValue::Str(s) => ascii_string(out, s),
    }
}

/// The header, without the binary data that follows it; `values(i)`: the little-endian bytes of output `i`,
/// for each output written as JSON. None where one of those holds a value JSON cannot carry (NaN, infinity).
pub fn reply_head<'a>(head: &ReplyHead, values: impl Fn(usize) -> &'a [u8]) -> Option<String> {
    let json: usize = (head.outputs.iter().enumerate())
        .filter(|(_, o)| o.data == ReplyData::Values)
        .map(|(i, _)| 24 * values(i).len())
        .sum();
    let mut out = String::with_capacity(128 + 96 * head.outputs.len() + json);
    out.push_str("{\"model_name\":");
    ascii_string(&mut out, &head.model_name);
    out.push_str(",\"model_version\":");
    ascii_string(&mut out, &head.model_version);
    if !head.id.is_empty() {
        out.push_str(",\"id\":");
        ascii_string(&mut out, &head.id);
    }
    if !head.parameters.is_empty() {
        out.push_str(",\"parameters\":{");
        for (i, (key, v)) in head.parameters.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            ascii_string(&mut out, key);
            out.push(':');
            value(&mut out, v);
        }
        out.push('}');
    }
    out.push_str(",\"outputs\":[");
    for (i, output) in head.outputs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"name\":");
        ascii_string(&mut out, &output.name);
        out.push_str(",\"datatype\":");
        ascii_string(&mut out, &output.datatype);
        out.push_str(",\"shape\":[");
        for (j, d) in output.shape.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            let _ = write!(out, "{d}");
        }
        match &output.data {
            ReplyData::Texts(texts) => {
                out.push_str("],\"data\":[");
                for (j, text) in texts.iter().enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    ascii_string(&mut out, text);
                }
                out.push_str("]}");
            }
            ReplyData::Values => {
                out.push_str("],\"data\":");
                if !write_values(&mut out, &output.datatype, values(i)) {
                    return None;
                }
                out.push('}');
            }
            ReplyData::Binary(size) => {
                let _ = write!(out, "],\"parameters\":{{\"binary_data_size\":{size}}}}}");
            }
        }
    }
    out.push_str("]}");
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_as_python_ensure_ascii_does() {
        let mut out = String::new();
        ascii_string(&mut out, "a\"b\\c\n\r\t\u{8}\u{c}\u{1}\u{7f}é\u{1F600}~ ");
        assert_eq!(
            out,
            r#""a\"b\\c\n\r\t\b\f\u0001\u007f\u00e9\ud83d\ude00~ ""#
        );
    }

    #[test]
    fn the_head_is_written_in_the_encoder_order() {
        let mut head = ReplyHead {
            model_name: "m".into(),
            model_version: "1".into(),
            id: "r".into(),
            parameters: vec![
                ("b".into(), ReplyValue::Bool(true)),
                ("i".into(), ReplyValue::Int(-3)),
                ("u".into(), ReplyValue::Uint(u64::MAX)),
                ("s".into(), ReplyValue::Str("x".into())),
            ],
            outputs: vec![
                ReplyOutput {
                    name: "Y".into(),
                    datatype: "FP32".into(),
                    shape: vec![1, 4],
                    data: ReplyData::Binary(16),
                },
                ReplyOutput {
                    name: "Z".into(),
                    datatype: "BYTES".into(),
                    shape: vec![],
                    data: ReplyData::Binary(5),
                },
                ReplyOutput {
                    name: "W".into(),
                    datatype: "INT32".into(),
                    shape: vec![2],
                    data: ReplyData::Values,
                },
                ReplyOutput {
                    name: "T".into(),
                    datatype: "BYTES".into(),
                    shape: vec![2],
                    data: ReplyData::Texts(vec!["a\"é".into(), "".into()]),
                },
            ],
        };
        let w: Vec<u8> = [7i32, -1].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(
            reply_head(&head, |i| if i == 2 { &w[..] } else { &[] }).unwrap(),
            concat!(
                r#"{"model_name":"m","model_version":"1","id":"r","#,
                r#""parameters":{"b":true,"i":-3,"u":18446744073709551615,"s":"x"},"#,
                r#""outputs":[{"name":"Y","datatype":"FP32","shape":[1,4],"parameters":{"binary_data_size":16}},"#,
                r#"{"name":"Z","datatype":"BYTES","shape":[],"parameters":{"binary_data_size":5}},"#,
                r#"{"name":"W","datatype":"INT32","shape":[2],"data":[7,-1]},"#,
                r#"{"name":"T","datatype":"BYTES","shape":[2],"data":["a\"\u00e9",""]}]}"#
            )
        );
        head.outputs[2].datatype = "FP32".into();
        let nan = f32::NAN.to_le_bytes();
        assert_eq!(
            reply_head(&head, |_| &nan[..]),
            None,
            "NaN is Python's to refuse"
        );
    }

    #[test]
    fn an_empty_id_and_no_parameters_are_left_out() {
        let head = ReplyHead {
            model_name: "m".into(),
            model_version: "".into(),
            id: "".into(),
            parameters: vec![],
            outputs: vec![],
        };
        assert_eq!(
            reply_head(&head, |_| &[]).unwrap(),
            r#"{"model_name":"m","model_version":"","outputs":[]}"#
        );
    }
}
