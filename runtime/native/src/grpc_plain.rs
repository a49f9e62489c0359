//! The common shape of a decoded `ModelInfer` request, recognised here so that Python can build it without its
//! structural walk: every input's bytes in `raw_input_contents` (one each, no typed `contents`), no tensor that
//! names shared memory, input names and output names each unique, every datatype one Python reads.
//!
//! This is a fast path, not a second decoder: [`is_plain`] answers `true` only for a request on which every
//! structural check of `grpc_codec.decode_request` passes. Anything else is decoded there, with its own
//! messages. What is left to Python on this path are the checks of a tensor against its bytes
//! (`dtypes.tensor_from_raw`), the same calls in the same order.

use std::collections::HashSet;

use crate::http_infer::DATATYPES;
use crate::messages::{ModelInferRequest, Parameters};

fn names_shared_memory(parameters: &Parameters) -> bool {
    parameters
        .keys()
        .any(|key| key.starts_with("shared_memory_"))
}

/// Whether `grpc_codec.decode_request` would pass every structural check of `request` (see the module).
pub fn is_plain(request: &ModelInferRequest) -> bool {
    if request.raw_input_contents.len() != request.inputs.len() {
        return false;
    }
    let mut inputs = HashSet::with_capacity(request.inputs.len());
    let inputs_plain = request.inputs.iter().all(|tensor| {
        tensor.contents.is_none()
            && DATATYPES.contains(&tensor.datatype.as_str())
            && !names_shared_memory(&tensor.parameters)
            && inputs.insert(tensor.name.as_str())
    });
    let mut outputs = HashSet::with_capacity(request.outputs.len());
    inputs_plain
        && request.outputs.iter().all(|tensor| {
            !names_shared_memory(&tensor.parameters) && outputs.insert(tensor.name.as_str())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{
        InferInputTensor, InferParameter, InferRequestedOutputTensor, InferTensorContents,
        ParameterChoice,
    };
    use bytes::Bytes;

    fn input(name: &str, datatype: &str) -> InferInputTensor {
        InferInputTensor {
            name: name.into(),
            datatype: datatype.into(),
            shape: vec![4],
            ..Default::default()
        }
    }

    fn output(name: &str) -> InferRequestedOutputTensor {
        InferRequestedOutputTensor {
            name: name.into(),
            ..Default::default()
        }
    }

    fn request(inputs: Vec<InferInputTensor>, raw: usize) -> ModelInferRequest {
        ModelInferRequest {
            model_name: "m".into(),
            inputs,
            raw_input_contents: vec![Bytes::from_static(&[0; 16]); raw],
            ..Default::default()
        }
    }

    fn shared_memory() -> Parameters {
        let region = InferParameter {
            choice: Some(ParameterChoice::String("r".into())),
        };
        Parameters::from([("shared_memory_region".to_string(), region)])
    }

    #[test]
    fn raw_inputs_with_unique_names_and_known_datatypes_are_plain() {
        let mut plain = request(vec![input("A", "FP32"), input("B", "BYTES")], 2);
        plain.outputs = vec![output("X"), output("Y")];
        let other = InferParameter {
            choice: Some(ParameterChoice::Int64(1)),
        };
        plain.inputs[0].parameters = Parameters::from([("priority".to_string(), other)]);
        assert!(is_plain(&plain));
        assert!(is_plain(&request(vec![], 0)));
    }

    #[test]
    fn a_count_of_raw_contents_other_than_one_per_input_is_not() {
        assert!(!is_plain(&request(vec![input("A", "FP32")], 0)));
        assert!(!is_plain(&request(vec![input("A", "FP32")], 2)));
        assert!(!is_plain(&request(vec![], 1)));
    }

    #[test]
    fn typed_contents_unknown_datatypes_and_repeated_names_are_not() {
        let mut typed = request(vec![input("A", "FP32")], 1);
        typed.inputs[0].contents = Some(InferTensorContents::default());
        assert!(!is_plain(&typed));
        assert!(!is_plain(&request(vec![input("A", "BF16")], 1)));
        assert!(!is_plain(&request(vec![input("A", "fp32")], 1)));
        assert!(!is_plain(&request(
            vec![input("A", "FP32"), input("A", "FP32")],
            2
        )));
        let mut outputs = request(vec![input("A", "FP32")], 1);
        outputs.outputs = vec![output("X"), output("X")];
        assert!(!is_plain(&outputs));
    }

    #[test]
    fn shared_memory_on_an_input_or_an_output_is_not() {
        let mut on_input = request(vec![input("A", "FP32")], 1);
        on_input.inputs[0].parameters = shared_memory();
        assert!(!is_plain(&on_input));
        let mut on_output = request(vec![input("A", "FP32")], 1);
        on_output.outputs = vec![InferRequestedOutputTensor {
            name: "X".into(),
            parameters: shared_memory(),
        }];
        assert!(!is_plain(&on_output));
    }
}
