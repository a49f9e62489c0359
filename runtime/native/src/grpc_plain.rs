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

/// Dimensions a tensor may have (`dtypes.MAX_DIMS`).
pub const MAX_DIMS: usize = 32;
/// numpy's largest array in bytes (`dtypes._MAX_ELEMENTS_BYTES`).
const MAX_ELEMENTS_BYTES: u128 = i64::MAX as u128;

/// The byte count of a tensor of `shape` whose elements have `itemsize` bytes (not BYTES), where every check of
/// `dtypes.element_count` passes on it: at most [`MAX_DIMS`] dimensions, none negative, and the product of the
/// dimensions (a 0 counted as 1) times the size within what numpy can hold. `None` where one fails: Python's
/// checks then say which, with their messages.
pub fn fixed_size_bytes(shape: &[i64], itemsize: usize) -> Option<usize> {
    if shape.len() > MAX_DIMS || itemsize == 0 {
        return None;
    }
    let unit = itemsize as u128;
    let mut nonzero: u128 = 1;
    let mut empty = false;
    for &dim in shape {
        let dim = u128::try_from(dim).ok()?; // negative: refused by Python
        empty |= dim == 0;
        nonzero = nonzero.checked_mul(dim.max(1))?;
        if nonzero * unit > MAX_ELEMENTS_BYTES {
            return None;
        }
    }
    if empty {
        return Some(0);
    }
    usize::try_from(nonzero * unit).ok()
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

    #[test]
    fn fixed_sizes_as_element_count_reckons_them() {
        assert_eq!(fixed_size_bytes(&[], 4), Some(4)); // a scalar: one element
        assert_eq!(fixed_size_bytes(&[2, 3], 4), Some(24));
        assert_eq!(fixed_size_bytes(&[1, 16], 1), Some(16));
        assert_eq!(fixed_size_bytes(&[0, 5], 8), Some(0));
        assert_eq!(fixed_size_bytes(&[1; MAX_DIMS], 2), Some(2));
    }

    #[test]
    fn what_element_count_refuses_is_none() {
        assert_eq!(fixed_size_bytes(&[1; MAX_DIMS + 1], 2), None); // too many dimensions
        assert_eq!(fixed_size_bytes(&[4, -1], 4), None); // negative
        assert_eq!(fixed_size_bytes(&[i64::MAX], 1), Some(i64::MAX as usize));
        assert_eq!(fixed_size_bytes(&[i64::MAX], 2), None); // past numpy's largest array
        assert_eq!(fixed_size_bytes(&[0, i64::MAX, 2], 1), None); // even with a zero dimension, as Python
        assert_eq!(fixed_size_bytes(&[1 << 32, 1 << 32], 1), None);
        assert_eq!(fixed_size_bytes(&[4], 0), None); // BYTES is not fixed-size
    }
}
