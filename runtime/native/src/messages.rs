//! The KServe v2 / Triton messages the native core decodes and encodes itself (field numbers as in
//! `grpc_service.proto`, package `inference`). Everything else crosses to Python as raw bytes.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
use prost::Message;

/// One request or response parameter: `oneof parameter_choice`.
#[derive(Clone, PartialEq, Message)]
pub struct InferParameter {
    #[prost(oneof = "ParameterChoice", tags = "1, 2, 3, 4, 5")]
    pub choice: Option<ParameterChoice>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ParameterChoice {
    #[prost(bool, tag = "1")]
    Bool(bool),
    #[prost(int64, tag = "2")]
    Int64(i64),
    #[prost(string, tag = "3")]
    String(String),
    #[prost(double, tag = "4")]
    Double(f64),
    #[prost(uint64, tag = "5")]
    Uint64(u64),
}

/// Typed tensor contents (the alternative to `raw_input_contents`).
#[derive(Clone, PartialEq, Message)]
pub struct InferTensorContents {
    #[prost(bool, repeated, tag = "1")]
    pub bool_contents: Vec<bool>,
    #[prost(int32, repeated, tag = "2")]
    pub int_contents: Vec<i32>,
    #[prost(int64, repeated, tag = "3")]
    pub int64_contents: Vec<i64>,
    #[prost(uint32, repeated, tag = "4")]
    pub uint_contents: Vec<u32>,
    #[prost(uint64, repeated, tag = "5")]
    pub uint64_contents: Vec<u64>,
    #[prost(float, repeated, tag = "6")]
    pub fp32_contents: Vec<f32>,
    #[prost(double, repeated, tag = "7")]
    pub fp64_contents: Vec<f64>,
    #[prost(bytes = "bytes", repeated, tag = "8")]
    pub bytes_contents: Vec<Bytes>,
}

pub type Parameters = HashMap<String, InferParameter>;

#[derive(Clone, PartialEq, Message)]
pub struct InferInputTensor {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub datatype: String,
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: Parameters,
    #[prost(message, optional, tag = "5")]
    pub contents: Option<InferTensorContents>,
}

#[derive(Clone, PartialEq, Message)]
pub struct InferRequestedOutputTensor {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(map = "string, message", tag = "2")]
    pub parameters: Parameters,
}

/// `ModelInferRequest`; `raw_input_contents` are slices of the received buffer (no copy).
#[derive(Clone, PartialEq, Message)]
pub struct ModelInferRequest {
    #[prost(string, tag = "1")]
    pub model_name: String,
    #[prost(string, tag = "2")]
    pub model_version: String,
    #[prost(string, tag = "3")]
    pub id: String,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: Parameters,
    #[prost(message, repeated, tag = "5")]
    pub inputs: Vec<InferInputTensor>,
    #[prost(message, repeated, tag = "6")]
    pub outputs: Vec<InferRequestedOutputTensor>,
    #[prost(bytes = "bytes", repeated, tag = "7")]
    pub raw_input_contents: Vec<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
pub struct InferOutputTensor {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub datatype: String,
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: Parameters,
}

/// `ModelInferResponse` without its field 6 (`raw_output_contents`), which `encode_response` appends
/// straight from the output buffers.
#[derive(Clone, PartialEq, Message)]
pub struct ModelInferResponseHead {
    #[prost(string, tag = "1")]
    pub model_name: String,
    #[prost(string, tag = "2")]
    pub model_version: String,
    #[prost(string, tag = "3")]
    pub id: String,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: Parameters,
    #[prost(message, repeated, tag = "5")]
    pub outputs: Vec<InferOutputTensor>,
}

const RAW_OUTPUT_CONTENTS: u32 = 6;

/// The length of a `ModelInferResponse` of `head` and `payloads` as [`write_response`] writes it.
fn response_len(head: &ModelInferResponseHead, payloads: &[&[u8]]) -> usize {
    let tails: usize = payloads
        .iter()
        .map(|p| key_len(RAW_OUTPUT_CONTENTS) + encoded_len_varint(p.len() as u64) + p.len())
        .sum();
    head.encoded_len() + tails
}

/// Writes the head, then one `raw_output_contents` entry per payload, copied once from `payloads`.
fn write_response(head: &ModelInferResponseHead, payloads: &[&[u8]], out: &mut BytesMut) {
    head.encode(out).expect("BytesMut grows as needed");
    for payload in payloads {
        encode_key(RAW_OUTPUT_CONTENTS, WireType::LengthDelimited, out);
        encode_varint(payload.len() as u64, out);
        out.put_slice(payload);
    }
}

/// The serialized `ModelInferResponse`: the head, then one `raw_output_contents` entry per payload, copied
/// once from `payloads` into the message.
pub fn encode_response(head: &ModelInferResponseHead, payloads: &[&[u8]]) -> Bytes {
    let mut out = BytesMut::with_capacity(response_len(head, payloads));
    write_response(head, payloads, &mut out);
    out.freeze()
}

/// `ModelStreamInferResponse.infer_response` (field 2; field 1, `error_message`, is left empty).
const STREAM_INFER_RESPONSE: u32 = 2;

/// The serialized `ModelStreamInferResponse` carrying the `ModelInferResponse` that [`encode_response`] writes,
/// in one buffer: the payloads are copied once.
pub fn encode_stream_response(head: &ModelInferResponseHead, payloads: &[&[u8]]) -> Bytes {
    let inner = response_len(head, payloads);
    let mut out = BytesMut::with_capacity(
        key_len(STREAM_INFER_RESPONSE) + encoded_len_varint(inner as u64) + inner,
    );
    encode_key(STREAM_INFER_RESPONSE, WireType::LengthDelimited, &mut out);
    encode_varint(inner as u64, &mut out);
    write_response(head, payloads, &mut out);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, PartialEq, Message)]
    struct StreamResponse {
        #[prost(string, tag = "1")]
        error_message: String,
        #[prost(message, optional, tag = "2")]
        infer_response: Option<FullResponse>,
    }

    #[test]
    fn stream_response_wraps_the_response() {
        let mut parameters = Parameters::new();
        parameters.insert(
            "triton_final_response".into(),
            InferParameter {
                choice: Some(ParameterChoice::Bool(true)),
            },
        );
        let head = ModelInferResponseHead {
            model_name: "m".into(),
            id: "7".into(),
            parameters,
            outputs: vec![InferOutputTensor {
                name: "OUT".into(),
                datatype: "INT8".into(),
                shape: vec![200],
                ..Default::default()
            }],
            ..Default::default()
        };
        let big = [3u8; 200]; // a two-byte length inside, and outside
        for payloads in [vec![&big[..]], vec![], vec![&[][..], &big[..]]] {
            let bytes = encode_stream_response(&head, &payloads);
            let decoded = StreamResponse::decode(bytes).unwrap();
            assert_eq!(decoded.error_message, "");
            let full = decoded.infer_response.unwrap();
            assert_eq!((full.model_name.as_str(), full.outputs.len()), ("m", 1));
            let raw: Vec<Vec<u8>> = payloads.iter().map(|p| p.to_vec()).collect();
            assert_eq!(full.raw_output_contents, raw);
        }
    }

    /// The same message as ModelInferResponse with its raw_output_contents field, for checking the
    /// hand-written tail.
    #[derive(Clone, PartialEq, Message)]
    struct FullResponse {
        #[prost(string, tag = "1")]
        model_name: String,
        #[prost(message, repeated, tag = "5")]
        outputs: Vec<InferOutputTensor>,
        #[prost(bytes = "vec", repeated, tag = "6")]
        raw_output_contents: Vec<Vec<u8>>,
    }

    #[test]
    fn response_tail_decodes_as_raw_output_contents() {
        let head = ModelInferResponseHead {
            model_name: "m".into(),
            outputs: vec![InferOutputTensor {
                name: "OUT".into(),
                datatype: "FP32".into(),
                shape: vec![1, 2],
                ..Default::default()
            }],
            ..Default::default()
        };
        let big = vec![7u8; 300];
        let bytes = encode_response(&head, &[&[1, 2, 3, 4, 5, 6, 7, 8], &[], &big]);
        let full = FullResponse::decode(bytes).unwrap();
        assert_eq!(full.model_name, "m");
        assert_eq!(full.outputs[0].shape, vec![1, 2]);
        assert_eq!(
            full.raw_output_contents,
            vec![vec![1, 2, 3, 4, 5, 6, 7, 8], vec![], big]
        );
    }

    #[test]
    fn request_raw_contents_are_slices_of_the_input() {
        let request = ModelInferRequest {
            model_name: "add_sub".into(),
            inputs: vec![InferInputTensor {
                name: "IN".into(),
                datatype: "FP32".into(),
                shape: vec![2],
                ..Default::default()
            }],
            raw_input_contents: vec![Bytes::from_static(&[0, 0, 128, 63, 0, 0, 0, 64])],
            ..Default::default()
        };
        let wire = Bytes::from(request.encode_to_vec());
        let decoded = ModelInferRequest::decode(wire.clone()).unwrap();
        assert_eq!(decoded, request);
        let raw = &decoded.raw_input_contents[0];
        let start = raw.as_ptr() as usize - wire.as_ptr() as usize;
        assert!(
            start < wire.len(),
            "raw contents point into the received buffer"
        );
    }

    #[test]
    fn parameters_and_typed_contents_round_trip() {
        let mut parameters = Parameters::new();
        parameters.insert(
            "p".into(),
            InferParameter {
                choice: Some(ParameterChoice::Uint64(u64::MAX)),
            },
        );
        let tensor = InferInputTensor {
            name: "T".into(),
            datatype: "BYTES".into(),
            shape: vec![2],
            parameters,
            contents: Some(InferTensorContents {
                bytes_contents: vec![Bytes::from_static(b"a"), Bytes::new()],
                ..Default::default()
            }),
        };
        let decoded = InferInputTensor::decode(Bytes::from(tensor.encode_to_vec())).unwrap();
        assert_eq!(decoded, tensor);
    }

    #[test]
    fn garbage_is_a_decode_error() {
        assert!(ModelInferRequest::decode(Bytes::from_static(&[0x0a, 0xff, 0xff])).is_err());
    }
}
